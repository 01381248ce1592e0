-- An idempotency scope joins principal, space, method and path with NUL
-- bytes, which text cannot hold: scope and key are bytes.
ALTER TABLE store_idempotency
	ALTER COLUMN scope TYPE bytea USING convert_to(scope, 'UTF8'),
	ALTER COLUMN key TYPE bytea USING convert_to(key, 'UTF8');
