// The official OpenAI client (npm `openai`) against a running graft serve.
//   node openai_client.mjs BASE_URL   (e.g. http://127.0.0.1:8000/v1)
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import assert from "node:assert/strict";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });

const models = await client.models.list();
const ids = models.data.map((m) => m.id);
assert.ok(ids.includes("gdn"), `models: ${ids}`);

const plain = await client.chat.completions.create({
  model: ids[0], messages: [{ role: "user", content: "Hello" }], max_tokens: 8, temperature: 0,
  logprobs: true, top_logprobs: 2,
});
assert.equal(plain.object, "chat.completion");
assert.equal(plain.choices[0].message.role, "assistant");
assert.equal(plain.choices[0].logprobs.content.length, plain.usage.completion_tokens);
assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);

const stream = await client.chat.completions.create({
  model: ids[0], messages: [{ role: "user", content: "Hello" }], max_tokens: 8, temperature: 0, stream: true,
});
let text = "";
let reasoning = "";
let finish = null;
for await (const chunk of stream) {
  text += chunk.choices[0]?.delta?.content ?? "";
  reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.equal(text, plain.choices[0].message.content);
// The demo template opens <think>: the text is reasoning_content (vLLM's field), streamed alike.
assert.equal(reasoning, plain.choices[0].message.reasoning_content ?? "");
assert.ok(finish === "length" || finish === "stop");

// An agent loop's second turn as the client sends it: the call's arguments a JSON string.
const tools = [{ type: "function", function: { name: "get_weather", parameters: {
  type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const second = await client.chat.completions.create({
  model: ids[0], tools, max_tokens: 4, temperature: 0,
  messages: [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
      function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
    { role: "tool", tool_call_id: "call_1", content: "18 C, sunny" },
  ],
});
assert.equal(second.choices[0].message.role, "assistant");

// A forced call (tool_choice "required"): tool_calls whose arguments follow the parameters.
const forced = await client.chat.completions.create({
  model: "gdn", tools, tool_choice: "required", max_tokens: 300, temperature: 0,
  messages: [{ role: "user", content: "Weather in Paris?" }], chat_template_kwargs: { enable_thinking: false },
});
assert.equal(forced.choices[0].finish_reason, "tool_calls", JSON.stringify(forced.choices[0]));
const call = forced.choices[0].message.tool_calls[0];
assert.equal(call.function.name, "get_weather");
assert.equal(typeof JSON.parse(call.function.arguments).city, "string");

// Structured output through the client's own helper: a zod schema, parsed back by the client.
const Verdict = z.object({
  verdict: z.enum(["benign", "malicious"]), score: z.number().int(), note: z.string().max(16).nullable(),
  tags: z.array(z.string().max(8)).max(3),
});
for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 3 }]) {
  const parsed = await client.chat.completions.parse({
    model: "gdn", messages: [{ role: "user", content: "Classify the log line." }], max_tokens: 400, ...sampling,
    response_format: zodResponseFormat(Verdict, "verdict"), chat_template_kwargs: { enable_thinking: false },
  });
  const v = parsed.choices[0].message.parsed;
  assert.ok(v, `parsed: ${parsed.choices[0].message.content}`);
  assert.ok(["benign", "malicious"].includes(v.verdict) && Number.isInteger(v.score), JSON.stringify(v));
}

// The Responses API: text out (output_text, the client's convenience), the same text streamed,
// structured output through text.format.
const resp = await client.responses.create({
  model: "gdn", input: "Hello", instructions: "Answer briefly.", max_output_tokens: 8, temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
});
assert.equal(resp.object, "response");
assert.ok(resp.status === "completed" || resp.status === "incomplete", resp.status);
assert.equal(typeof resp.output_text, "string");
assert.equal(resp.usage.total_tokens, resp.usage.input_tokens + resp.usage.output_tokens);
let deltas = "";
let completed = null;
const events = await client.responses.create({
  model: "gdn", input: "Hello", instructions: "Answer briefly.", max_output_tokens: 8, temperature: 0, stream: true,
  chat_template_kwargs: { enable_thinking: false },
});
for await (const ev of events) {
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") completed = ev.response;
}
assert.equal(deltas, resp.output_text);
assert.ok(completed && completed.output.at(-1).content[0].text === deltas);
const shaped = await client.responses.create({
  model: "gdn", input: [{ role: "user", content: [{ type: "input_text", text: "Classify." }] }], max_output_tokens: 300,
  temperature: 0, chat_template_kwargs: { enable_thinking: false },
  text: { format: { type: "json_schema", name: "v", strict: true, schema: {
    type: "object", properties: { verdict: { enum: ["benign", "malicious"] } }, required: ["verdict"], additionalProperties: false } } },
});
assert.ok(["benign", "malicious"].includes(JSON.parse(shaped.output_text).verdict), shaped.output_text);

const completion = await client.completions.create({ model: "gdn", prompt: "Once", max_tokens: 4, temperature: 0 });
assert.equal(completion.object, "text_completion");

await assert.rejects(
  client.chat.completions.create({ model: "missing", messages: [{ role: "user", content: "x" }] }),
  (err) => err.status === 404 && /does not exist/.test(err.message));
console.log("openai client: ok");
