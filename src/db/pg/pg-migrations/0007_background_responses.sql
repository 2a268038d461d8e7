CREATE TABLE "response_events" (
	"response_id" text NOT NULL,
	"seq" integer NOT NULL,
	"type" text NOT NULL,
	"text" text NOT NULL,
	CONSTRAINT "response_events_response_id_seq_pk" PRIMARY KEY("response_id","seq")
);
--> statement-breakpoint
ALTER TABLE "responses" ADD COLUMN "background" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "responses" ADD COLUMN "cancel_requested" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "response_events" ADD CONSTRAINT "response_events_response_id_responses_id_fk" FOREIGN KEY ("response_id") REFERENCES "public"."responses"("id") ON DELETE cascade ON UPDATE no action;