-- trace_parent is the W3C trace context of the span that sent a message
-- (store.Message.TraceParent), set only by a host that traces; NULL
-- otherwise.
ALTER TABLE store_messages ADD COLUMN trace_parent text;
