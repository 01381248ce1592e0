-- dead_letter is a message's dead-letter metadata (store.Message.DeadLetter,
-- spec/peers.md §Dead-letter metadata) as JSON; NULL for a message that did
-- not arrive by dead-lettering.
ALTER TABLE store_messages ADD COLUMN dead_letter jsonb;

-- progress is what a long-running host-extension Operation (purge,
-- redrive) reports of its work (store.Operation.Progress); NULL otherwise.
ALTER TABLE store_operations ADD COLUMN progress bytea;
