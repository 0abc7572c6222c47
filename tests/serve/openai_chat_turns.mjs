// The official openai npm client holds one long chat with `squeezekv serve`, sending the whole
// history every turn as clients do. Prints, per turn, the usage the server reported and the kept
// caches' K/V bytes from /metrics after the turn, as one JSON object.
import OpenAI from "openai";

const base = `http://127.0.0.1:${process.env.PORT}`;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused" });
const turns = Number(process.env.TURNS ?? 100);
const questions = ["Name a colour.", "Name an animal.", "What is 2 plus 3?", "Say hello.", "Name a fruit.",
                   "Name a city.", "What day comes after Monday?"];

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : -1;
}

const model = (await client.models.list()).data[0].id;
const messages = [];
const out = { turns: [] };
for (let t = 0; t < turns; ++t) {
  messages.push({ role: "user", content: questions[t % questions.length] });
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8,
                                                   temperature: 0, squeezekv: { method: "squeeze", budget: 64 } });
  const reply = r.choices[0].message.content;
  messages.push({ role: "assistant", content: reply });
  out.turns.push({ prompt_tokens: r.usage.prompt_tokens, completion_tokens: r.usage.completion_tokens,
                   cached_tokens: r.usage.prompt_tokens_details?.cached_tokens ?? -1,
                   finish_reason: r.choices[0].finish_reason, kept_bytes: await metric("squeezekv_kept_cache_bytes") });
}
out.hits = await metric("squeezekv_kept_cache_hits_total");
out.violations = await metric("squeezekv_kv_promise_violations_total");
out.fragments_reused = await metric("squeezekv_prompt_fragments_reused_total");
out.fragments_encoded = await metric("squeezekv_prompt_fragments_encoded_total");
console.log(JSON.stringify(out));
