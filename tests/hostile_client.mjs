// hostile_client.mjs - clients that misbehave against ds-serve, for
// tests/cli/serve_hostile.sh. Loopback only; every mode ends by itself.
//
// usage: node tests/hostile_client.mjs MODE PORT ARGS...
//   hold PORT N SECS ADDR...   open N connections, spread over the source
//                              addresses ADDR (127.x.y.z); odd ones send
//                              nothing, even ones trickle a header byte every
//                              200 ms; print "ready open=K closed=C" when all
//                              are connected, keep them for SECS, exit
//   perclient PORT N ADDR      open N idle connections from ADDR; print how
//                              many the server closed within 2 s
//   trickle PORT SECS          one connection trickling a header byte every
//                              200 ms; print "closed" when the server closes
//                              it within SECS, else "open"
//   upload PORT N LEN SECS     N POSTs without an API key, each announcing LEN
//                              body bytes and sending LEN - 1 of them (never
//                              finishing); print "ready" when every write is
//                              taken or refused, keep the sockets for SECS
//   announce PORT LEN          a POST announcing LEN body bytes and sending
//                              none; print the status line answered within
//                              10 s, or "none"
//   retrieve BASE_URL MODEL    the openai client's models.retrieve(MODEL) and
//                              models.list(); print the retrieved id
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [mode, port, ...args] = process.argv.slice(2);
const P = Number(port);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function connect(localAddress) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port: P, localAddress });
    s.gone = false;
    s.on('close', () => { s.gone = true; });
    s.on('error', () => {});
    s.on('data', () => {});
    s.once('connect', () => resolve(s));
    s.once('error', () => resolve(s));
  });
}

function trickle(s) {
  const msg = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' + 'X-Pad: ' + 'a'.repeat(100000);
  let i = 0;
  const t = setInterval(() => {
    if (s.gone || i >= msg.length) { clearInterval(t); return; }
    s.write(msg[i++]);
  }, 200);
  t.unref();
}

if (mode === 'hold') {
  const [n, secs, ...addrs] = args;
  const socks = [];
  for (let i = 0; i < Number(n); i++) {
    const s = await connect(addrs[i % addrs.length]);
    if (i % 2 === 0) trickle(s);
    socks.push(s);
  }
  await sleep(300);
  const closed = socks.filter((s) => s.gone).length;
  console.log(`ready open=${socks.length - closed} closed=${closed}`);
  await sleep(Number(secs) * 1000);
  socks.forEach((s) => s.destroy());
  process.exit(0);
} else if (mode === 'perclient') {
  const [n, addr] = args;
  const socks = [];
  for (let i = 0; i < Number(n); i++) socks.push(await connect(addr));
  await sleep(2000);
  console.log(socks.filter((s) => s.gone).length);
  socks.forEach((s) => s.destroy());
  process.exit(0);
} else if (mode === 'trickle') {
  const s = await connect(undefined);
  trickle(s);
  const end = Date.now() + Number(args[0]) * 1000;
  while (!s.gone && Date.now() < end) await sleep(100);
  console.log(s.gone ? 'closed' : 'open');
  s.destroy();
  process.exit(0);
} else if (mode === 'upload') {
  const [n, len, secs] = args.map(Number);
  const body = Buffer.alloc(len - 1, 'a');
  const socks = [];
  const done = [];
  for (let i = 0; i < n; i++) {
    const s = await connect(undefined);
    socks.push(s);
    done.push(new Promise((resolve) => {
      s.once('close', resolve);
      s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n`);
      s.write(body, resolve);
    }));
  }
  await Promise.race([Promise.all(done), sleep(Number(secs) * 1000)]);
  await sleep(500);
  console.log('ready');
  await sleep(Number(secs) * 1000);
  socks.forEach((s) => s.destroy());
  process.exit(0);
} else if (mode === 'announce') {
  const s = await connect(undefined);
  let got = '';
  s.on('data', (d) => { got += d.toString('latin1'); });
  s.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${args[0]}\r\n\r\n`);
  const end = Date.now() + 10000;
  while (!got.includes('\r\n') && !s.gone && Date.now() < end) await sleep(50);
  console.log(got.includes('\r\n') ? got.split('\r\n')[0] : 'none');
  s.destroy();
  process.exit(0);
} else if (mode === 'retrieve') {
  const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
  const { default: OpenAI } = await import(pathToFileURL(path.join(root, '.npm-data/node_modules/openai/index.mjs')).href);
  const client = new OpenAI({ baseURL: port, apiKey: process.env.DSQ_TEST_KEY || 'none', maxRetries: 0, timeout: 30000 });
  const m = await client.models.retrieve(args[0]);
  const list = await client.models.list();
  if (m.object !== 'model' || !list.data.some((x) => x.id === m.id)) {
    console.log(`retrieve: ${JSON.stringify(m)} not in the list ${JSON.stringify(list.data)}`);
    process.exit(1);
  }
  try {
    await client.models.retrieve('no-such-model');
    console.log('retrieve of an unknown model did not fail');
    process.exit(1);
  } catch (e) {
    if (e.status !== 404) { console.log(`unknown model: ${e.status} ${e.message}`); process.exit(1); }
  }
  console.log(m.id);
  process.exit(0);
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
