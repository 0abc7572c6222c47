// The official openai npm client against `squeezekv serve`, unchanged but for its base URL:
// completions and chat, streamed and not. Prints what it got as one JSON object.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `http://127.0.0.1:${process.env.PORT}/v1`, apiKey: "unused" });
const model = "stories260K";
const out = {};

out.models = (await client.models.list()).data.map((m) => m.id);
const c = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 40, temperature: 0 });
out.completion = c.choices[0].text;
out.usage = c.usage;
let streamed = "";
for await (const chunk of await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 40,
                                                            temperature: 0, stream: true })) {
  streamed += chunk.choices[0]?.text ?? "";
}
out.completion_stream = streamed;
const messages = [{ role: "user", content: "Tell me a story." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.chat_role = chat.choices[0].message.role;
let chatStreamed = "";
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0,
                                                                 stream: true })) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? "";
}
out.chat_stream = chatStreamed;
// The extra field passes through the client untouched; a bad one is a 400 naming it.
const squeezed = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 40, temperature: 0,
                                                   squeezekv: { method: "squeeze", budget: 16 } });
out.squeeze = squeezed.choices[0].text;
try {
  await client.completions.create({ model, prompt: "x", max_tokens: 4, squeezekv: { budget: -1 } });
  out.bad = "accepted";
} catch (e) {
  out.bad = { status: e.status, param: e.param ?? e.error?.param };
}
console.log(JSON.stringify(out));
