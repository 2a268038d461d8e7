DROP INDEX `messages_user_created_idx`;--> statement-breakpoint
DROP INDEX `messages_user_idx`;--> statement-breakpoint
-- '' only for rows written by hand (Parley always gives one); the rows stored so far get theirs below.
ALTER TABLE `messages` ADD `item_id` text DEFAULT '' NOT NULL;--> statement-breakpoint
UPDATE `messages` SET `item_id` = 'msg_' || `id`;--> statement-breakpoint
ALTER TABLE `messages` ADD `item` text;--> statement-breakpoint
CREATE INDEX `messages_conversation_item_idx` ON `messages` (`conversation_id`,`item_id`);--> statement-breakpoint
CREATE INDEX `messages_user_created_idx` ON `messages` (`user_id`,`created_at`,`id`) WHERE "messages"."item" IS NULL;--> statement-breakpoint
CREATE INDEX `messages_user_idx` ON `messages` (`user_id`) WHERE "messages"."item" IS NULL;--> statement-breakpoint
ALTER TABLE `conversations` ADD `metadata` text;--> statement-breakpoint
-- The count triggers of 0002 and 0004, now counting only what the native API lists: user and
-- assistant messages (`item IS NULL`), not a conversation's other items.
DROP TRIGGER `messages_count_insert`;--> statement-breakpoint
CREATE TRIGGER `messages_count_insert` AFTER INSERT ON `messages` WHEN NEW.`item` IS NULL BEGIN
	INSERT INTO `user_message_counts` (`user_id`, `message_count`) VALUES (NEW.`user_id`, 1)
		ON CONFLICT (`user_id`) DO UPDATE SET `message_count` = `message_count` + 1;
	INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`, `updated_at`) VALUES (NEW.`conversation_id`, 1, NEW.`created_at`)
		ON CONFLICT (`conversation_id`) DO UPDATE SET `message_count` = `message_count` + 1,
			`updated_at` = max(coalesce(`updated_at`, excluded.`updated_at`), excluded.`updated_at`);
END;--> statement-breakpoint
DROP TRIGGER `messages_count_delete`;--> statement-breakpoint
CREATE TRIGGER `messages_count_delete` AFTER DELETE ON `messages` WHEN OLD.`item` IS NULL BEGIN
	UPDATE `user_message_counts` SET `message_count` = `message_count` - 1 WHERE `user_id` = OLD.`user_id`;
	UPDATE `conversation_message_counts` SET `message_count` = `message_count` - 1 WHERE `conversation_id` = OLD.`conversation_id`;
END;--> statement-breakpoint
DROP TRIGGER `messages_count_move`;--> statement-breakpoint
CREATE TRIGGER `messages_count_move` AFTER UPDATE OF `user_id`, `conversation_id` ON `messages` WHEN OLD.`item` IS NULL BEGIN
	UPDATE `user_message_counts` SET `message_count` = `message_count` - 1 WHERE `user_id` = OLD.`user_id`;
	UPDATE `conversation_message_counts` SET `message_count` = `message_count` - 1 WHERE `conversation_id` = OLD.`conversation_id`;
	INSERT INTO `user_message_counts` (`user_id`, `message_count`) VALUES (NEW.`user_id`, 1)
		ON CONFLICT (`user_id`) DO UPDATE SET `message_count` = `message_count` + 1;
	INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`) VALUES (NEW.`conversation_id`, 1)
		ON CONFLICT (`conversation_id`) DO UPDATE SET `message_count` = `message_count` + 1;
END;
