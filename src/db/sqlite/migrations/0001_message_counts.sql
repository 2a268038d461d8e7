CREATE TABLE `conversation_message_counts` (
	`conversation_id` integer PRIMARY KEY NOT NULL,
	`message_count` integer NOT NULL,
	FOREIGN KEY (`conversation_id`) REFERENCES `conversations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `user_message_counts` (
	`user_id` integer PRIMARY KEY NOT NULL,
	`message_count` integer NOT NULL,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE no action
);
