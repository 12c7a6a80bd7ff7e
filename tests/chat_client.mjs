// chat_client.mjs - drives ds-serve's /v1/chat/completions with the official
// OpenAI client library (npm "openai", from .npm-data), streaming included.
//
// usage: node tests/chat_client.mjs BASE_URL MODEL
// Checks (exit 1 on the first failure, printing what differs):
//  - a non-streamed completion parses into the client's types: one choice,
//    message.role "assistant", finish_reason, usage counts that add up;
//  - the same request streamed: the first delta carries the role, the
//    concatenated content and reasoning_content deltas equal the
//    non-streamed message (greedy, so both runs generate the same tokens),
//    one finish_reason, the usage chunk when asked for;
//  - thinking on through chat_template_kwargs (extra body field) moves the
//    text into reasoning_content (the server runs --reasoning-parser deepseek_v3);
//  - tools are refused with a 400 the client raises as BadRequestError.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [base, model] = process.argv.slice(2);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const { default: OpenAI } = await import(pathToFileURL(path.join(root, '.npm-data/node_modules/openai/index.mjs')).href);
const client = new OpenAI({ baseURL: base, apiKey: 'unused', maxRetries: 0 });

function check(cond, what) {
  if (!cond) { console.error(`chat_client: FAIL: ${what}`); process.exit(1); }
}

const messages = [
  { role: 'system', content: 'You are a calculator.' },
  { role: 'user', content: 'What is 2+3?' },
  { role: 'assistant', content: '<think>add</think>5' },
  { role: 'user', content: 'And 7*6? 你好 😀' },
];

async function both(extra) {
  const req = { model, messages, max_tokens: 24, temperature: 0, ...extra };
  const whole = await client.chat.completions.create(req);
  check(whole.object === 'chat.completion', `object ${whole.object}`);
  check(whole.choices.length === 1, 'one choice');
  const m = whole.choices[0].message;
  check(m.role === 'assistant', `role ${m.role}`);
  check(['stop', 'length'].includes(whole.choices[0].finish_reason), `finish_reason ${whole.choices[0].finish_reason}`);
  const u = whole.usage;
  check(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens,
        `usage ${JSON.stringify(u)}`);

  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = '', reasoning = '', first = true, finish = null, usage = null, n = 0;
  for await (const ch of stream) {
    n++;
    check(ch.object === 'chat.completion.chunk', `chunk object ${ch.object}`);
    if (ch.usage) { usage = ch.usage; continue; }
    const d = ch.choices[0].delta;
    if (first) { check(d.role === 'assistant', 'the first delta carries the role'); first = false; }
    if (d.content) content += d.content;
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (ch.choices[0].finish_reason) { check(finish === null, 'one finish_reason'); finish = ch.choices[0].finish_reason; }
  }
  check(n >= 3, `only ${n} chunks`);
  check(finish === whole.choices[0].finish_reason, `streamed finish_reason ${finish}`);
  check(content === (m.content ?? ''), `streamed content ${JSON.stringify(content)} != ${JSON.stringify(m.content)}`);
  check(reasoning === (m.reasoning_content ?? ''),
        `streamed reasoning ${JSON.stringify(reasoning)} != ${JSON.stringify(m.reasoning_content)}`);
  check(usage && usage.completion_tokens === u.completion_tokens && usage.prompt_tokens === u.prompt_tokens,
        `streamed usage ${JSON.stringify(usage)}`);
  return m;
}

const plain = await both({});
check(plain.content && plain.content.length > 0 && plain.reasoning_content == null, 'thinking off: all content');
const think = await both({ chat_template_kwargs: { thinking: true } });
check(think.reasoning_content && think.reasoning_content.length > 0, 'thinking on: reasoning_content');

let refused = null;
try {
  await client.chat.completions.create({ model, messages, tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] });
} catch (e) { refused = e; }
check(refused && refused.status === 400 && /tool/.test(refused.message), `tools: ${refused && refused.message}`);
console.log(`chat_client: openai ${client.constructor.VERSION ?? ''} ok: content ${JSON.stringify(plain.content.slice(0, 40))}..., ` +
            `reasoning ${think.reasoning_content.length} chars, streamed identically`);
