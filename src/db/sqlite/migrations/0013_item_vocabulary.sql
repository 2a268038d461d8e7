-- Items are kept in the chat layer's words (types.ts, ConversationItem), no longer the Responses
-- API's: reasoning is thought, function_call toolCall, function_call_output toolResult.
UPDATE `messages` SET `item` = json_set(`item`, '$.type', CASE json_extract(`item`, '$.type') WHEN 'reasoning' THEN 'thought' WHEN 'function_call' THEN 'toolCall' ELSE 'toolResult' END)
  WHERE json_extract(`item`, '$.type') IN ('reasoning', 'function_call', 'function_call_output');
--> statement-breakpoint
UPDATE `responses` SET `input` = (SELECT json_group_array(json(CASE json_extract(`value`, '$.type') WHEN 'reasoning' THEN json_set(`value`, '$.type', 'thought') WHEN 'function_call' THEN json_set(`value`, '$.type', 'toolCall') WHEN 'function_call_output' THEN json_set(`value`, '$.type', 'toolResult') ELSE `value` END) ORDER BY `key`) FROM json_each(`responses`.`input`));
--> statement-breakpoint
UPDATE `responses` SET `output` = (SELECT json_group_array(json(CASE json_extract(`value`, '$.type') WHEN 'reasoning' THEN json_set(`value`, '$.type', 'thought') WHEN 'function_call' THEN json_set(`value`, '$.type', 'toolCall') WHEN 'function_call_output' THEN json_set(`value`, '$.type', 'toolResult') ELSE `value` END) ORDER BY `key`) FROM json_each(`responses`.`output`));
