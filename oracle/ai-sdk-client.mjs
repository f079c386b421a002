// The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`) against a running graft serve: text,
// streaming, generateObject with a zod schema, a tool with toolChoice "required"; and
// `@ai-sdk/openai`'s default model, which speaks the Responses API.
//   node ai-sdk-client.mjs BASE_URL   (e.g. http://127.0.0.1:8000/v1)
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, generateText, streamText, tool } from "ai";
import { z } from "zod";
import assert from "node:assert/strict";

const graft = createOpenAICompatible({
  name: "graft", baseURL: process.argv[2], apiKey: "unused", supportsStructuredOutputs: true,
});
const model = graft.chatModel("gdn");
const noThinking = { graft: { chat_template_kwargs: { enable_thinking: false } } };

const text = await generateText({ model, prompt: "Hello", maxOutputTokens: 8, temperature: 0 });
assert.ok(text.usage.outputTokens > 0, JSON.stringify(text.usage));

let streamed = "";
const stream = streamText({ model, prompt: "Hello", maxOutputTokens: 8, temperature: 0, providerOptions: noThinking });
for await (const part of stream.textStream) streamed += part;
const whole = await generateText({ model, prompt: "Hello", maxOutputTokens: 8, temperature: 0, providerOptions: noThinking });
assert.equal(streamed, whole.text);

const { object } = await generateObject({
  model, maxOutputTokens: 400, temperature: 0, providerOptions: noThinking,
  schema: z.object({ verdict: z.enum(["benign", "malicious"]), score: z.number().int(), note: z.string().max(12) }),
  prompt: "Classify the log line.",
});
assert.ok(["benign", "malicious"].includes(object.verdict) && Number.isInteger(object.score), JSON.stringify(object));

const called = await generateText({
  model, maxOutputTokens: 300, temperature: 0, providerOptions: noThinking, toolChoice: "required",
  prompt: "Weather in Paris?",
  tools: { get_weather: tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string().max(12) }) }) },
});
assert.equal(called.finishReason, "tool-calls", JSON.stringify(called.response?.body ?? called.text));
assert.equal(called.toolCalls[0].toolName, "get_weather");
assert.equal(typeof called.toolCalls[0].input.city, "string");
// @ai-sdk/openai's default model speaks the Responses API.
const openai = createOpenAI({ baseURL: process.argv[2], apiKey: "unused" });
const viaResponses = await generateText({
  model: openai("gdn"), prompt: "Hello", maxOutputTokens: 8, temperature: 0,
  providerOptions: { openai: { store: false } },
});
assert.equal(typeof viaResponses.text, "string");
assert.ok(viaResponses.usage.outputTokens > 0, JSON.stringify(viaResponses.usage));
console.log("ai-sdk client: ok");
