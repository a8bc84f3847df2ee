// Runs one task through the OpenAI Agents SDK (its default: the Responses
// API) against the base URL given as the first argument: the model calls
// a tool, the SDK runs it and sends the result back, the model answers.
// Prints one JSON line: {"ok": bool, "items": [...], "text": ..., "error": ...}.
import { Agent, run, tool, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';

setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0 }));
const weather = tool({
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny, 21C in ${city}`,
});
const agent = new Agent({ name: 'helper', instructions: 'Be brief.', model: 'auto', tools: [weather] });
try {
  const result = await run(agent, 'What is the weather in Paris?', { stream: process.argv[3] === 'stream' });
  if (process.argv[3] === 'stream') {
    for await (const _ of result.toStream()) { /* drain */ }
    await result.completed;
  }
  console.log(JSON.stringify({ ok: true, items: result.newItems.map((i) => i.type), text: String(result.finalOutput ?? '') }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String((e && e.message) || e) }));
}
