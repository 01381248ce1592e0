-- history is a message's attempt history (store.Message.History, the
-- newest store.MaxAttempts deliveries and how each ended) as a JSON array;
-- NULL for a message never retried or moved.
ALTER TABLE store_messages ADD COLUMN history jsonb;
