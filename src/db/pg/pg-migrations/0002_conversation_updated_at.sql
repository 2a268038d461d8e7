ALTER TABLE "conversation_message_counts" ADD COLUMN "updated_at" bigint;--> statement-breakpoint
-- The count function of 0001, now also keeping the newest message's time in the row it writes
-- anyway. GREATEST ignores NULL: a message stored with an older time does not move it back.
CREATE OR REPLACE FUNCTION messages_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE user_message_counts SET message_count = message_count - 1 WHERE user_id = OLD.user_id;
		UPDATE conversation_message_counts SET message_count = message_count - 1 WHERE conversation_id = OLD.conversation_id;
	END IF;
	IF TG_OP IN ('UPDATE', 'INSERT') THEN
		INSERT INTO user_message_counts AS c (user_id, message_count) VALUES (NEW.user_id, 1)
			ON CONFLICT (user_id) DO UPDATE SET message_count = c.message_count + 1;
		INSERT INTO conversation_message_counts AS c (conversation_id, message_count, updated_at) VALUES (NEW.conversation_id, 1, NEW.created_at)
			ON CONFLICT (conversation_id) DO UPDATE SET message_count = c.message_count + 1, updated_at = GREATEST(c.updated_at, EXCLUDED.updated_at);
	END IF;
	RETURN NULL;
END;
$$;
--> statement-breakpoint
-- Conversations stored before the column existed.
UPDATE conversation_message_counts c SET updated_at = (SELECT max(m.created_at) FROM messages m WHERE m.conversation_id = c.conversation_id);
