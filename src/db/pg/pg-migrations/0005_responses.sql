CREATE TABLE "responses" (
	"id" text PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"previous_id" text,
	"chain_key" text NOT NULL,
	"status" text NOT NULL,
	"created_at" bigint DEFAULT (extract(epoch from clock_timestamp()) * 1000)::bigint NOT NULL,
	"model" text NOT NULL,
	"params" jsonb NOT NULL,
	"input" jsonb NOT NULL,
	"output" jsonb NOT NULL,
	"usage" jsonb,
	"finish_reason" text,
	"error" text
);
--> statement-breakpoint
ALTER TABLE "responses" ADD CONSTRAINT "responses_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "responses_user_created_idx" ON "responses" USING btree ("user_id","created_at");