-- The store's tables: one row per record of runtime/store's model.
--
-- Keys and the IDs the store orders by are text COLLATE "C", so that the
-- database orders them byte by byte, as Go's strings.Compare does. Times are
-- Unix seconds and nanoseconds in two columns, so that a time reads back
-- exactly as written (timestamptz keeps microseconds).

CREATE SEQUENCE store_put_seq;

CREATE TABLE store_resources (
	uid            text COLLATE "C" PRIMARY KEY,
	space          text COLLATE "C" NOT NULL,
	name           text COLLATE "C" NOT NULL,
	form_url       text NOT NULL,
	offering       text NOT NULL,
	spec           bytea,
	private_inputs bytea,
	observed       bytea,
	state          text NOT NULL,
	generation     bigint NOT NULL,
	etag           text NOT NULL,
	create_sec     bigint NOT NULL,
	create_nsec    integer NOT NULL,
	update_sec     bigint NOT NULL,
	update_nsec    integer NOT NULL,
	exports        text[],
	creator        text NOT NULL,
	-- put_seq orders writes: when two records claim one name, the later
	-- write holds it (the state machine's rule).
	put_seq        bigint NOT NULL DEFAULT nextval('store_put_seq')
);
CREATE INDEX store_resources_name ON store_resources (space, name, put_seq DESC);
CREATE INDEX store_resources_order ON store_resources (create_sec, create_nsec, uid);

CREATE TABLE store_operations (
	id              text COLLATE "C" PRIMARY KEY,
	space           text NOT NULL,
	kind            text NOT NULL,
	resource_uid    text NOT NULL,
	state           text NOT NULL,
	effect          text NOT NULL,
	error           bytea,
	idempotency_key text NOT NULL,
	principal       text NOT NULL,
	form_url        text NOT NULL,
	intent          bytea,
	create_sec      bigint NOT NULL,
	create_nsec     integer NOT NULL,
	update_sec      bigint NOT NULL,
	update_nsec     integer NOT NULL
);
CREATE INDEX store_operations_unfinished ON store_operations (create_sec, create_nsec, id)
	WHERE state NOT IN ('succeeded', 'failed');

CREATE TABLE store_idempotency (
	scope        text COLLATE "C" NOT NULL,
	key          text COLLATE "C" NOT NULL,
	fingerprint  text NOT NULL,
	operation_id text NOT NULL,
	create_sec   bigint NOT NULL,
	create_nsec  integer NOT NULL,
	PRIMARY KEY (scope, key)
);

CREATE TABLE store_messages (
	queue       text COLLATE "C" NOT NULL,
	id          text COLLATE "C" NOT NULL,
	accepted_at bigint NOT NULL,
	visible_at  bigint NOT NULL,
	attempts    integer NOT NULL,
	lease       text NOT NULL,
	size        integer NOT NULL,
	body        bytea NOT NULL,
	PRIMARY KEY (queue, id)
);
CREATE INDEX store_messages_order ON store_messages (queue, accepted_at, id);

-- One row per committed transaction of Apply, written in it: after a
-- connection is lost during COMMIT, the row says whether it applied.
-- Rows older than the longest in-doubt window are deleted.
CREATE TABLE store_commits (
	id bigint PRIMARY KEY,
	at timestamptz NOT NULL DEFAULT now()
);
