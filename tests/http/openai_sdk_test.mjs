// The official OpenAI SDK (npm's `openai`) and curl as clients of a real `ptxserve serve`
// on the test model: completions and chat completions, streamed and not, n > 1, stop
// strings, log-probs, errors, and the raw server-sent-event framing.
//
// node tests/http/openai_sdk_test.mjs --ptxserve BIN --model DIR --chat-template F
import { spawn, execFileSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`missing ${name}`);
  return process.argv[i + 1];
}

const ptxserve = arg('--ptxserve');
const modelDir = arg('--model');
const chatTemplate = arg('--chat-template');
const apiKey = 'sdk-test-key';

let server;
let baseURL;
let client;
let modelName;

// Starts the server and resolves with its HTTP port once it printed "ready".
function startServer() {
  return new Promise((resolve, reject) => {
    const keyFile = `${process.env.TMPDIR || '/tmp'}/ptxserve-sdk-key-${process.pid}`;
    execFileSync('sh', ['-c', `printf %s '${apiKey}' > '${keyFile}'`]);
    server = spawn(ptxserve, ['serve', '--model', modelDir, '--port', '0', '--http-port', '0',
      '--metrics-port', '-1', '--backend', 'cpu', '--api-key-file', keyFile,
      '--chat-template', chatTemplate], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    let port = 0;
    const timer = setTimeout(() => reject(new Error(`no ready line: ${out}`)), 60000);
    server.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/OpenAI API on http:\/\/[^:]+:(\d+)\/v1/);
      if (m) port = Number(m[1]);
      if (port && out.includes('ready:')) {
        clearTimeout(timer);
        resolve(port);
      }
    });
    server.on('exit', (code) => reject(new Error(`ptxserve exited with ${code}: ${out}`)));
  });
}

before(async () => {
  const port = await startServer();
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey, baseURL, maxRetries: 0, timeout: 60000 });
  const models = await client.models.list();
  modelName = models.data[0].id;
});

after(() => {
  if (server) server.kill('SIGTERM');
});

describe('completions', () => {
  test('non-streaming, greedy, with usage', async () => {
    const r = await client.completions.create({
      model: modelName, prompt: 'The cat', max_tokens: 12, temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.usage.completion_tokens, 12);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  });

  test('streaming gives the same text as non-streaming', async () => {
    const params = { model: modelName, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
    const whole = await client.completions.create(params);
    const stream = await client.completions.create({
      ...params, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(finish, 'length');
    assert.deepEqual(usage, whole.usage);
  });

  test('n samples with a seed: n choices, reproducible', async () => {
    const params = {
      model: modelName, prompt: 'The dog', max_tokens: 10, temperature: 1, n: 3, seed: 7,
    };
    const a = await client.completions.create(params);
    const b = await client.completions.create(params);
    assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.equal(new Set(a.choices.map((c) => c.text)).size > 1, true, 'samples should differ');
    assert.equal(a.usage.completion_tokens, 30);
  });

  test('a list of prompts', async () => {
    const r = await client.completions.create({
      model: modelName, prompt: ['The cat', 'The dog'], max_tokens: 4, temperature: 0,
    });
    assert.equal(r.choices.length, 2);
  });

  test('stop strings end the text before the stop', async () => {
    const free = await client.completions.create({
      model: modelName, prompt: 'Once upon a time', max_tokens: 40, temperature: 0,
    });
    const text = free.choices[0].text;
    const stop = text.trim().split(' ')[3];
    const r = await client.completions.create({
      model: modelName, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stop: [stop],
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  });

  test('logprobs: one entry per token, top alternatives', async () => {
    const r = await client.completions.create({
      model: modelName, prompt: 'The cat', max_tokens: 5, temperature: 0, logprobs: 3,
    });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    assert.equal(lp.top_logprobs.length, 5);
    for (let i = 0; i < 5; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.ok(Object.keys(lp.top_logprobs[i]).length <= 3);
      // Greedy: the chosen token is the most likely one.
      const best = Math.max(...Object.values(lp.top_logprobs[i]));
      assert.ok(Math.abs(best - lp.token_logprobs[i]) < 1e-5);
    }
    assert.equal(lp.tokens.join(''), r.choices[0].text.slice(0, lp.tokens.join('').length));
  });

  test('echo puts the prompt first', async () => {
    const r = await client.completions.create({
      model: modelName, prompt: 'The cat', max_tokens: 3, temperature: 0, echo: true,
    });
    assert.ok(r.choices[0].text.startsWith('The cat'));
  });
});

describe('chat completions', () => {
  const messages = [
    { role: 'system', content: 'Tell a story.' },
    { role: 'user', content: 'Once upon a time there was a cat.' },
  ];

  test('non-streaming: the assistant message, usage, finish_reason', async () => {
    const r = await client.chat.completions.create({
      model: modelName, messages, max_completion_tokens: 10, temperature: 0,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 10);
  });

  test('streaming: role first, then deltas equal to the whole answer', async () => {
    const params = { model: modelName, messages, max_tokens: 16, temperature: 0 };
    const whole = await client.chat.completions.create(params);
    const stream = await client.chat.completions.create({ ...params, stream: true });
    let text = '';
    let role = null;
    let finish = null;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      const c = chunk.choices[0];
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
    assert.equal(role, 'assistant');
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
  });

  test('n > 1 and logprobs with top_logprobs and token text', async () => {
    const r = await client.chat.completions.create({
      model: modelName, messages, max_tokens: 6, temperature: 0.9, seed: 11, n: 2,
      logprobs: true, top_logprobs: 3,
    });
    assert.equal(r.choices.length, 2);
    for (const c of r.choices) {
      assert.equal(c.logprobs.content.length, 6);
      for (const t of c.logprobs.content) {
        assert.equal(typeof t.token, 'string');
        assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
        assert.equal(t.top_logprobs.length, 3);
      }
    }
    assert.equal(r.usage.completion_tokens, 12);
  });

  test('stop strings in chat', async () => {
    const free = await client.chat.completions.create({
      model: modelName, messages, max_tokens: 30, temperature: 0,
    });
    const text = free.choices[0].message.content;
    const stop = text.trim().split(' ')[2];
    const r = await client.chat.completions.create({
      model: modelName, messages, max_tokens: 30, temperature: 0, stop,
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  });

  test('a role the template refuses is a 400 with its message', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: modelName, messages: [{ role: 'robot', content: 'x' }], max_tokens: 2,
      }),
      (e) => e.status === 400 && /Unknown role: robot/.test(e.message));
  });
});

describe('errors', () => {
  test('a bad parameter is a 400 naming it', async () => {
    await assert.rejects(
      client.completions.create({ model: modelName, prompt: 'x', max_tokens: 4, top_p: 1.5 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'top_p' &&
        /top_p/.test(e.message));
  });

  test('an unknown model is a 404', async () => {
    await assert.rejects(
      client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 4 }),
      (e) => e instanceof OpenAI.NotFoundError);
  });

  test('a wrong API key is a 401', async () => {
    const bad = new OpenAI({ apiKey: 'wrong', baseURL, maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  });

  test('a prompt longer than the context is a 400', async () => {
    await assert.rejects(
      client.completions.create({ model: modelName, prompt: 'cat '.repeat(2000), max_tokens: 4 }),
      (e) => e.status === 400 && e.param === 'prompt');
  });
});

describe('raw HTTP with curl', () => {
  test('server-sent events: data lines, blank-line separated, [DONE] last', () => {
    const body = JSON.stringify({
      model: modelName, prompt: 'The cat', max_tokens: 6, temperature: 0, stream: true,
    });
    const out = execFileSync('curl', ['-sS', '-N', '-i', '-H', `Authorization: Bearer ${apiKey}`,
      '-H', 'Content-Type: application/json', '-d', body, `${baseURL}/completions`]).toString();
    const [head, payload] = out.split('\r\n\r\n', 2);
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /content-type: text\/event-stream/i);
    const events = payload.split('\n\n').filter((e) => e.length > 0);
    assert.equal(events[events.length - 1], 'data: [DONE]');
    for (const e of events.slice(0, -1)) {
      assert.match(e, /^data: \{/);
      JSON.parse(e.slice('data: '.length));
    }
  });

  test('health needs no key; tokenize and detokenize round-trip', () => {
    const code = execFileSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}',
      `${baseURL.replace('/v1', '')}/health`]).toString();
    assert.equal(code, '200');
    const auth = ['-H', `Authorization: Bearer ${apiKey}`];
    const tok = JSON.parse(execFileSync('curl', ['-sS', ...auth, '-d',
      JSON.stringify({ prompt: 'Once upon a time' }), `${baseURL.replace('/v1', '')}/tokenize`]));
    assert.equal(tok.count, tok.tokens.length);
    const detok = JSON.parse(execFileSync('curl', ['-sS', ...auth, '-d',
      JSON.stringify({ tokens: tok.tokens }), `${baseURL.replace('/v1', '')}/detokenize`]));
    assert.equal(detok.prompt, 'Once upon a time');
  });
});
