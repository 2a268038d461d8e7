ALTER TABLE `conversations` ADD `updated_at` integer;--> statement-breakpoint
CREATE INDEX `conversations_user_updated_idx` ON `conversations` (`user_id`,`updated_at`,`id`);--> statement-breakpoint
-- Keeps conversations.updated_at the newest message's time, inside the statement that inserts the
-- message, whatever writes it. max(): a message stored with an older time does not move it back.
CREATE TRIGGER `messages_conversation_updated` AFTER INSERT ON `messages` BEGIN
	UPDATE `conversations` SET `updated_at` = max(coalesce(`updated_at`, NEW.`created_at`), NEW.`created_at`)
		WHERE `id` = NEW.`conversation_id`;
END;
--> statement-breakpoint
-- Conversations stored before the column existed.
UPDATE `conversations` SET `updated_at` = (SELECT max(`created_at`) FROM `messages` WHERE `messages`.`conversation_id` = `conversations`.`id`);
