CREATE TABLE "token_holds" (
	"holder" text PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"since" text NOT NULL,
	"tokens" bigint NOT NULL,
	"expires_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "token_quotas" (
	"user_id" integer PRIMARY KEY NOT NULL,
	"tokens" bigint NOT NULL,
	"period" text NOT NULL
);
--> statement-breakpoint
CREATE INDEX "token_holds_user" ON "token_holds" USING btree ("user_id","since");