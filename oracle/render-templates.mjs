// Reference renderings of chat templates with @huggingface/jinja (the renderer transformers.js
// uses), for graft's template tests.
//   node oracle/render-templates.mjs  ->  fixtures/templates/renders.json
import { Template } from "@huggingface/jinja";
import { readFileSync, writeFileSync } from "node:fs";

const dir = new URL("../fixtures/templates/", import.meta.url);
const templates = {
  qwen3: readFileSync(new URL("qwen3.jinja", dir), "utf8"),
  qwen3_5: readFileSync(new URL("qwen3_5.jinja", dir), "utf8"),
};
const cases = JSON.parse(readFileSync(new URL("conversations.json", dir), "utf8"));
const out = [];
for (const [name, text] of Object.entries(templates)) {
  const t = new Template(text);
  for (const c of cases) {
    if (c.only && c.only !== name) continue;
    const ctx = {
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt ?? true,
      bos_token: "", eos_token: "<|im_end|>",
      ...(c.enable_thinking !== undefined ? { enable_thinking: c.enable_thinking } : {}),
      ...(c.tools ? { tools: c.tools } : {}),
      ...(c.extra ?? {}),
    };
    try {
      out.push({ template: name, case: c.name, rendered: t.render(ctx) });
    } catch (e) {
      out.push({ template: name, case: c.name, error: String(e.message ?? e) });
    }
  }
}
writeFileSync(new URL("renders.json", dir), JSON.stringify(out, null, 1) + "\n");
console.log(`${out.length} renderings, ${out.filter((r) => r.error).length} errors`);
