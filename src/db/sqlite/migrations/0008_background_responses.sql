CREATE TABLE `response_events` (
	`response_id` text NOT NULL,
	`seq` integer NOT NULL,
	`type` text NOT NULL,
	`text` text NOT NULL,
	PRIMARY KEY(`response_id`, `seq`),
	FOREIGN KEY (`response_id`) REFERENCES `responses`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
ALTER TABLE `responses` ADD `background` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `responses` ADD `cancel_requested` integer DEFAULT false NOT NULL;