DROP INDEX "messages_user_created_idx";--> statement-breakpoint
DROP INDEX "messages_user_idx";--> statement-breakpoint
ALTER TABLE "conversations" ADD COLUMN "metadata" jsonb;--> statement-breakpoint
-- '' only for rows written by hand (Parley always gives one); the rows stored so far get theirs below.
ALTER TABLE "messages" ADD COLUMN "item_id" text DEFAULT '' NOT NULL;--> statement-breakpoint
UPDATE "messages" SET "item_id" = 'msg_' || "id";--> statement-breakpoint
ALTER TABLE "messages" ADD COLUMN "item" jsonb;--> statement-breakpoint
CREATE INDEX "messages_conversation_item_idx" ON "messages" USING btree ("conversation_id","item_id");--> statement-breakpoint
CREATE INDEX "messages_user_created_idx" ON "messages" USING btree ("user_id","created_at","id") WHERE "messages"."item" IS NULL;--> statement-breakpoint
CREATE INDEX "messages_user_idx" ON "messages" USING btree ("user_id","id") WHERE "messages"."item" IS NULL;--> statement-breakpoint
-- The count function of 0002, now counting only what the native API lists: user and assistant
-- messages (`item IS NULL`), not a conversation's other items.
CREATE OR REPLACE FUNCTION messages_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	-- Nested: OLD is unset on INSERT, NEW on DELETE, and plpgsql need not stop at AND.
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		IF OLD.item IS NULL THEN
			UPDATE user_message_counts SET message_count = message_count - 1 WHERE user_id = OLD.user_id;
			UPDATE conversation_message_counts SET message_count = message_count - 1 WHERE conversation_id = OLD.conversation_id;
		END IF;
	END IF;
	IF TG_OP IN ('UPDATE', 'INSERT') THEN
		IF NEW.item IS NULL THEN
			INSERT INTO user_message_counts AS c (user_id, message_count) VALUES (NEW.user_id, 1)
				ON CONFLICT (user_id) DO UPDATE SET message_count = c.message_count + 1;
			INSERT INTO conversation_message_counts AS c (conversation_id, message_count, updated_at) VALUES (NEW.conversation_id, 1, NEW.created_at)
				ON CONFLICT (conversation_id) DO UPDATE SET message_count = c.message_count + 1, updated_at = GREATEST(c.updated_at, EXCLUDED.updated_at);
		END IF;
	END IF;
	RETURN NULL;
END;
$$;
