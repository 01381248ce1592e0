-- paused is the AtLeastOnceQueue host extension "inactive delivery"
-- (store.Resource.Paused, spec/peers.md): kept beside the spec, which the
-- Form closes.
ALTER TABLE store_resources ADD COLUMN paused boolean NOT NULL DEFAULT false;
