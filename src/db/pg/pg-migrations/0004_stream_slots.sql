-- One row per open stream, for the per-key cap on concurrent streams (PARLEY_MAX_STREAMS_PER_KEY)
-- across every node (src/db/pg/stream-slots.ts). UNLOGGED like rate_buckets: a crash only empties
-- it, which frees the slots of streams the crash ended anyway.
CREATE UNLOGGED TABLE stream_slots (
	holder text PRIMARY KEY,
	key_id integer NOT NULL,
	expires_at bigint NOT NULL
);
--> statement-breakpoint
CREATE INDEX stream_slots_key_id ON stream_slots (key_id);
