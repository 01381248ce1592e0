-- Leases with fencing epochs, and cluster membership (spec/cluster.md).
-- A lease row is never deleted: a released or expired lease keeps its
-- epoch, so the next holder's epoch is always higher than any before it.

CREATE TABLE store_leases (
	name    text COLLATE "C" PRIMARY KEY,
	holder  text NOT NULL,
	epoch   bigint NOT NULL,
	expires timestamptz NOT NULL
);

CREATE TABLE store_members (
	id      text COLLATE "C" PRIMARY KEY,
	addr    text NOT NULL,
	started timestamptz NOT NULL,
	expires timestamptz NOT NULL
);
