ALTER TABLE `conversation_message_counts` ADD `updated_at` integer;--> statement-breakpoint
-- The count trigger of 0002, now also keeping the newest message's time in the row it writes
-- anyway. max(): a message stored with an older time does not move it back.
DROP TRIGGER `messages_count_insert`;
--> statement-breakpoint
CREATE TRIGGER `messages_count_insert` AFTER INSERT ON `messages` BEGIN
	INSERT INTO `user_message_counts` (`user_id`, `message_count`) VALUES (NEW.`user_id`, 1)
		ON CONFLICT (`user_id`) DO UPDATE SET `message_count` = `message_count` + 1;
	INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`, `updated_at`) VALUES (NEW.`conversation_id`, 1, NEW.`created_at`)
		ON CONFLICT (`conversation_id`) DO UPDATE SET `message_count` = `message_count` + 1,
			`updated_at` = max(coalesce(`updated_at`, excluded.`updated_at`), excluded.`updated_at`);
END;
--> statement-breakpoint
-- Conversations stored before the column existed.
UPDATE `conversation_message_counts` SET `updated_at` = (
	SELECT max(`created_at`) FROM `messages` WHERE `messages`.`conversation_id` = `conversation_message_counts`.`conversation_id`
);
