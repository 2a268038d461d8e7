CREATE TABLE `token_holds` (
	`holder` text PRIMARY KEY NOT NULL,
	`user_id` integer NOT NULL,
	`since` text NOT NULL,
	`tokens` integer NOT NULL,
	`expires_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `token_holds_user` ON `token_holds` (`user_id`,`since`);--> statement-breakpoint
CREATE TABLE `token_quotas` (
	`user_id` integer PRIMARY KEY NOT NULL,
	`tokens` integer NOT NULL,
	`period` text NOT NULL
);
