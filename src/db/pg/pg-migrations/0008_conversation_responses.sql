ALTER TABLE "responses" ADD COLUMN "conversation_id" integer;--> statement-breakpoint
ALTER TABLE "responses" ADD CONSTRAINT "responses_conversation_id_conversations_id_fk" FOREIGN KEY ("conversation_id") REFERENCES "public"."conversations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "responses_conversation_idx" ON "responses" USING btree ("conversation_id");