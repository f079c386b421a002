// LangChain JS (`@langchain/openai`) against a running graft serve: invoke, batch, stream,
// withStructuredOutput with a zod schema, and bindTools with a forced call.
//   node langchain-client.mjs BASE_URL   (e.g. http://127.0.0.1:8000/v1)
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import assert from "node:assert/strict";

const llm = new ChatOpenAI({
  model: "gdn", apiKey: "unused", temperature: 0, maxTokens: 400, maxRetries: 0,
  configuration: { baseURL: process.argv[2] },
  modelKwargs: { chat_template_kwargs: { enable_thinking: false } },
});

const one = await llm.invoke("Hello");
assert.equal(typeof one.content, "string");
const many = await llm.batch(["Hello", "Hi there"]);
assert.equal(many.length, 2);
let streamed = "";
for await (const chunk of await llm.stream("Hello")) streamed += chunk.content;
const again = await llm.invoke("Hello");
assert.equal(streamed, again.content);

const Verdict = z.object({ verdict: z.enum(["benign", "malicious"]), score: z.number().int(), note: z.string().max(12) });
for (const method of ["jsonSchema", "functionCalling"]) {
  const v = await llm.withStructuredOutput(Verdict, { method }).invoke("Classify the log line.");
  assert.ok(["benign", "malicious"].includes(v.verdict) && Number.isInteger(v.score), `${method}: ${JSON.stringify(v)}`);
}

const withTools = llm.bindTools(
  [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
     parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } }],
  { tool_choice: "required" });
const msg = await withTools.invoke("Weather in Paris?");
assert.equal(msg.tool_calls?.[0]?.name, "get_weather", JSON.stringify(msg));
assert.equal(typeof msg.tool_calls[0].args.city, "string");
console.log("langchain client: ok");
