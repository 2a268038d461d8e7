-- Keeps user_message_counts and conversation_message_counts equal to the rows in messages, inside
-- the statement that inserts, moves or deletes a message (so in its transaction), whatever writes it.
CREATE FUNCTION messages_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE user_message_counts SET message_count = message_count - 1 WHERE user_id = OLD.user_id;
		UPDATE conversation_message_counts SET message_count = message_count - 1 WHERE conversation_id = OLD.conversation_id;
	END IF;
	IF TG_OP IN ('UPDATE', 'INSERT') THEN
		INSERT INTO user_message_counts AS c (user_id, message_count) VALUES (NEW.user_id, 1)
			ON CONFLICT (user_id) DO UPDATE SET message_count = c.message_count + 1;
		INSERT INTO conversation_message_counts AS c (conversation_id, message_count) VALUES (NEW.conversation_id, 1)
			ON CONFLICT (conversation_id) DO UPDATE SET message_count = c.message_count + 1;
	END IF;
	RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER messages_count_change AFTER INSERT OR DELETE ON messages FOR EACH ROW EXECUTE FUNCTION messages_count();
--> statement-breakpoint
CREATE TRIGGER messages_count_move AFTER UPDATE OF user_id, conversation_id ON messages FOR EACH ROW
	WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id OR OLD.conversation_id IS DISTINCT FROM NEW.conversation_id)
	EXECUTE FUNCTION messages_count();
--> statement-breakpoint
-- Per-key request buckets shared by every node (src/db/pg/buckets.ts). UNLOGGED: a third of the
-- cost per request, and a crash only empties them, which forgives some requests. drizzle's schema
-- cannot declare an unlogged table, so it lives here rather than in schema.ts.
CREATE UNLOGGED TABLE rate_buckets (
	key_id integer PRIMARY KEY,
	tokens double precision NOT NULL,
	updated_at bigint NOT NULL,
	taken boolean NOT NULL
);
