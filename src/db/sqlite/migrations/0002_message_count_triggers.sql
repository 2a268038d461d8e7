-- Keeps user_message_counts and conversation_message_counts equal to the rows in messages, inside
-- the statement that inserts or deletes a message (so in its transaction), whatever writes it.
CREATE TRIGGER `messages_count_insert` AFTER INSERT ON `messages` BEGIN
	INSERT INTO `user_message_counts` (`user_id`, `message_count`) VALUES (NEW.`user_id`, 1)
		ON CONFLICT (`user_id`) DO UPDATE SET `message_count` = `message_count` + 1;
	INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`) VALUES (NEW.`conversation_id`, 1)
		ON CONFLICT (`conversation_id`) DO UPDATE SET `message_count` = `message_count` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `messages_count_delete` AFTER DELETE ON `messages` BEGIN
	UPDATE `user_message_counts` SET `message_count` = `message_count` - 1 WHERE `user_id` = OLD.`user_id`;
	UPDATE `conversation_message_counts` SET `message_count` = `message_count` - 1 WHERE `conversation_id` = OLD.`conversation_id`;
END;
--> statement-breakpoint
CREATE TRIGGER `messages_count_move` AFTER UPDATE OF `user_id`, `conversation_id` ON `messages` BEGIN
	UPDATE `user_message_counts` SET `message_count` = `message_count` - 1 WHERE `user_id` = OLD.`user_id`;
	UPDATE `conversation_message_counts` SET `message_count` = `message_count` - 1 WHERE `conversation_id` = OLD.`conversation_id`;
	INSERT INTO `user_message_counts` (`user_id`, `message_count`) VALUES (NEW.`user_id`, 1)
		ON CONFLICT (`user_id`) DO UPDATE SET `message_count` = `message_count` + 1;
	INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`) VALUES (NEW.`conversation_id`, 1)
		ON CONFLICT (`conversation_id`) DO UPDATE SET `message_count` = `message_count` + 1;
END;
--> statement-breakpoint
-- Databases created before the counters existed.
INSERT INTO `user_message_counts` (`user_id`, `message_count`)
	SELECT `user_id`, count(*) FROM `messages` GROUP BY `user_id`;
--> statement-breakpoint
INSERT INTO `conversation_message_counts` (`conversation_id`, `message_count`)
	SELECT `conversation_id`, count(*) FROM `messages` GROUP BY `conversation_id`;
