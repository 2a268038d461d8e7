// Replies the demo model learns its bigrams from. Written for this project (no third-party
// text). Single spaces between words and no leading space: each reply is tokenized exactly
// as llama.cpp would tokenize it right after "<|im_start|>assistant\n".
export const PLAIN_REPLIES: readonly string[] = [
  "Hello! How can I help you today?",
  "Hello there! It is nice to hear from you.",
  "Hi! I am happy to help you with that.",
  "I am happy to help you with your question.",
  "I am happy to help you with anything you need.",
  "I am glad you asked.",
  "Sure, I can help you with that.",
  "Sure! Let me think about it for a moment.",
  "Of course. Here is a short answer for you.",
  "Thank you for asking. I am doing well today.",
  "Thank you! That is a kind thing to say.",
  "That is a good question.",
  "That sounds like a fine plan to me.",
  "That is an interesting idea, and I like it.",
  "I think the answer is simple: take it one step at a time.",
  "I think you are on the right track.",
  "I am not sure, but I will do my best to help you.",
  "I am a small demo model, so my answers are short.",
  "I can only say a few simple things, but I say them kindly.",
  "I hope this helps you.",
  "I hope you have a lovely day.",
  "I would start with a small step and see how it goes.",
  "Let me know if there is anything else I can do for you.",
  "Let us try it together.",
  "Let us take a short break and then try again.",
  "Good morning! The sun is up and the day is new.",
  "Good idea. A little planning goes a long way.",
  "Good luck with your work today.",
  "You are welcome.",
  "You can ask me anything, and I will try to answer.",
  "You might try it again with fresh eyes.",
  "You did a great job.",
  "It is a pleasure to talk with you.",
  "It sounds like you have a busy day ahead.",
  "It depends on what you want to do next.",
  "It might help to write down the main points first.",
  "Here is a thought: small steps still move you forward.",
  "Here is what I know about that.",
  "Please tell me a little more about it.",
  "Please take your time.",
  "Yes, that is right.",
  "Yes, I can do that for you.",
  "No problem at all.",
  "No, I do not think so, but it is worth a try.",
  "Maybe we can look at it from another side.",
  "Maybe a walk outside would help you think.",
  "A cup of tea and a quiet room can work wonders.",
  "A good plan starts with a clear goal.",
  "The best way to learn is to practice a little every day.",
  "The weather is a fine topic for a chat.",
  "The answer is yes.",
  "Have a wonderful day!",
  "Have fun, and take care.",
  "What a nice thing to ask!",
  "What would you like to talk about?",
  "Great question! I will keep my answer short.",
  "Great, I am glad it works for you.",
  "Welcome back! It is good to see you again.",
  "Nice to meet you.",
];

export const JSON_REPLIES: readonly string[] = [
  // JSON, so a reply held to a JSON grammar ends by itself: a string closes after a sentence's
  // end or a name, a number before a comma or a brace, and a closing quote is followed by a brace
  // or bracket, never a comma (strings come last), so greedy decoding of a free object or array
  // closes it. Several objects a reply: each reply's first token is one more way for every reply
  // to begin, and a plain reply should almost never begin as JSON.
  '{"said": "I am happy to help you."} {"years": 36, "name": "Ada"} {"years": 7, "tags": ["friend"], "name": "Sam"} {"done": true, "size": 3, "story": "A short story"} {"nums": [1, 2, 3], "ok": false, "note": null} {"score": 10, "summary": "It is a pleasure to talk with you."}',
  '{"steps": ["plan"], "why": "That is a good question!"} {"rank": 42, "city": "Rome"} {"value": 100, "unit": "days"} {"said": "Have a wonderful day!"} {"hello": "Hello there!"} {"user": {"years": 25, "name": "Lee"}, "active": true}',
  '{"thanks": "You are welcome."} {"mood": "glad"} {"note": "Please take your time."} {"said": "Yes."} {"tags": ["kind"]} {"names": ["Ada"]}',
];

/** What the demo model and the family presets learn from. */
export const DEMO_CORPUS: readonly string[] = [...PLAIN_REPLIES, ...JSON_REPLIES];

/**
 * Replies of tool calls, which each generated model learns in its family's syntax (call-replies.ts):
 * one call, then the end of the reply, so a call ends by itself. Fewer than the replies that begin
 * with any one word, so a model offered tools mostly answers in words. Fewer calls than JSON lists
 * of strings, whose closing quote a comma then follows less often than a bracket; numbers first.
 */
export const CALL_REPLIES: readonly { name: string; arguments: Record<string, string | number> }[] = [
  { name: "get_weather", arguments: { city: "Paris" } },
  { name: "lookup", arguments: { limit: 3, query: "tea" } },
  { name: "get_time", arguments: { zone: "Rome" } },
];
