// The official OpenAI client (npm `openai`) against a running graft serve.
//   node openai_client.mjs BASE_URL   (e.g. http://127.0.0.1:8000/v1)
import OpenAI from "openai";
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
let finish = null;
for await (const chunk of stream) {
  text += chunk.choices[0]?.delta?.content ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.equal(text, plain.choices[0].message.content);
assert.ok(finish === "length" || finish === "stop");

const completion = await client.completions.create({ model: "gdn", prompt: "Once", max_tokens: 4, temperature: 0 });
assert.equal(completion.object, "text_completion");

await assert.rejects(
  client.chat.completions.create({ model: "missing", messages: [{ role: "user", content: "x" }] }),
  (err) => err.status === 404 && /does not exist/.test(err.message));
console.log("openai client: ok");
