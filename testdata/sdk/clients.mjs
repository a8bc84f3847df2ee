// Runs one chat request through each client SDK against the base URL given
// as the first argument and prints one JSON line per SDK:
// {"sdk": ..., "ok": bool, "text": ..., "error": ...}. With "stream" as the
// second argument the request streams.
import OpenAI from 'openai';
import { streamText, generateText } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';

const base = process.argv[2];
const stream = process.argv[3] === 'stream';
const prompt = 'hello';

async function run(sdk, f) {
  let line;
  try {
    line = { sdk, ok: true, text: await f() };
  } catch (e) {
    line = { sdk, ok: false, error: String((e && e.message) || e) };
  }
  console.log(JSON.stringify(line));
}

await run('openai-node', async () => {
  const c = new OpenAI({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
  if (!stream) {
    const r = await c.chat.completions.create({ model: 'auto', messages: [{ role: 'user', content: prompt }] });
    return r.choices[0].message.content;
  }
  const s = await c.chat.completions.create({ model: 'auto', messages: [{ role: 'user', content: prompt }], stream: true });
  let t = '';
  for await (const ch of s) t += ch.choices?.[0]?.delta?.content ?? '';
  return t;
});

for (const [sdk, model] of [
  ['vercel-openai-compatible', () => createOpenAICompatible({ name: 'switchyard', baseURL: base, apiKey: 'unused' }).chatModel('auto')],
  ['vercel-openai', () => createOpenAI({ baseURL: base, apiKey: 'unused' }).chat('auto')],
]) {
  await run(sdk, async () => {
    if (!stream) {
      const r = await generateText({ model: model(), prompt, maxRetries: 0 });
      return r.text;
    }
    let err;
    const r = streamText({ model: model(), prompt, maxRetries: 0, onError: ({ error }) => { err = error; } });
    let t = '';
    for await (const d of r.textStream) t += d;
    if (err) throw err;
    return t;
  });
}

await run('langchain', async () => {
  const m = new ChatOpenAI({ model: 'auto', apiKey: 'unused', maxRetries: 0, configuration: { baseURL: base } });
  if (!stream) return (await m.invoke(prompt)).content;
  let t = '';
  for await (const ch of await m.stream(prompt)) t += ch.content;
  return t;
});
