-- drizzle-kit leaves the action out of an added column's reference; deleting a conversation deletes its responses.
ALTER TABLE `responses` ADD `conversation_id` integer REFERENCES conversations(id) ON DELETE CASCADE;--> statement-breakpoint
CREATE INDEX `responses_conversation_idx` ON `responses` (`conversation_id`);
