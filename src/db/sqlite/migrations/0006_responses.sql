CREATE TABLE `responses` (
	`id` text PRIMARY KEY NOT NULL,
	`user_id` integer NOT NULL,
	`previous_id` text,
	`chain_key` text NOT NULL,
	`status` text NOT NULL,
	`created_at` integer DEFAULT (cast(unixepoch('subsec') * 1000 as integer)) NOT NULL,
	`model` text NOT NULL,
	`params` text NOT NULL,
	`input` text NOT NULL,
	`output` text NOT NULL,
	`usage` text,
	`finish_reason` text,
	`error` text,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `responses_user_created_idx` ON `responses` (`user_id`,`created_at`);