-- Items are kept in the chat layer's words (types.ts, ConversationItem), no longer the Responses
-- API's: reasoning is thought, function_call toolCall, function_call_output toolResult.
UPDATE "messages" SET "item" = jsonb_set("item", '{type}', to_jsonb(CASE "item" ->> 'type' WHEN 'reasoning' THEN 'thought' WHEN 'function_call' THEN 'toolCall' ELSE 'toolResult' END))
  WHERE "item" ->> 'type' IN ('reasoning', 'function_call', 'function_call_output');
--> statement-breakpoint
UPDATE "responses" SET "input" = (
  SELECT coalesce(jsonb_agg(CASE "e" ->> 'type' WHEN 'reasoning' THEN jsonb_set("e", '{type}', '"thought"') WHEN 'function_call' THEN jsonb_set("e", '{type}', '"toolCall"') WHEN 'function_call_output' THEN jsonb_set("e", '{type}', '"toolResult"') ELSE "e" END ORDER BY "i"), '[]'::jsonb)
  FROM jsonb_array_elements("responses"."input") WITH ORDINALITY AS "items"("e", "i")
);
--> statement-breakpoint
UPDATE "responses" SET "output" = (
  SELECT coalesce(jsonb_agg(CASE "e" ->> 'type' WHEN 'reasoning' THEN jsonb_set("e", '{type}', '"thought"') WHEN 'function_call' THEN jsonb_set("e", '{type}', '"toolCall"') WHEN 'function_call_output' THEN jsonb_set("e", '{type}', '"toolResult"') ELSE "e" END ORDER BY "i"), '[]'::jsonb)
  FROM jsonb_array_elements("responses"."output") WITH ORDINALITY AS "items"("e", "i")
);
