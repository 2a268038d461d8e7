/** Tools the tests offer, in the shapes the protocols take them. */

/** A Responses-API function tool, strict: one city, at most 16 characters. */
export const responsesWeatherTool = {
  type: "function" as const,
  name: "get_weather",
  description: "The weather in a city",
  strict: true,
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false },
};
