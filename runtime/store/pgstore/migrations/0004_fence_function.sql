-- store_fence checks, inside a pipelined batch, that a lease is still
-- current, share-locking its row until the transaction ends (as the
-- explicit transaction's SELECT ... FOR SHARE does); otherwise it aborts
-- the batch with SQLSTATE TF001, and the store works out which of the
-- batch's Applies were fenced in an explicit transaction.
CREATE FUNCTION store_fence(p_name text, p_holder text, p_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM 1 FROM store_leases
	WHERE name = p_name AND holder = p_holder AND epoch = p_epoch AND expires > now()
	FOR SHARE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'lease % epoch % of % is not current', p_name, p_epoch, p_holder USING ERRCODE = 'TF001';
	END IF;
END
$$;
