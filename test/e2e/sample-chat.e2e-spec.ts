import { randomUUID } from 'node:crypto';
import { expect } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { RateLimiterService, type RateLimitUsage } from 'nestjs-ratelimit';
import { AppModule } from '../../sample/app.module.js';
import type { ChatCompletion, ChatCompletionChunk } from '../../sample/chat-completions.js';
import { TOKENS_PER_MINUTE } from '../../sample/chat.controller.js';
import { FakeModel } from '../../sample/fake-model.js';
import { testRedisUrl } from '../support/redis/test-redis.js';
import { waitUntil } from '../support/wait.js';

/**
 * The sample's OpenAI-shaped chat endpoint (POST /v1/chat/completions) over real HTTP, once per
 * store: 'rpm' (20 requests a minute) and 'tpm' (10,000 tokens a minute, an estimate reserved up
 * front, the real count settled when the request ends) per API key. Every key is unique to this
 * run, so buckets left in Redis by other runs never meet these ones.
 *
 * The fake model streams 5,000 tokens a second here (50 in the sample), so a stream of hundreds of
 * tokens takes a tenth of a second. Time is real: the token buckets refill 10,000 / 60 tokens a
 * second (one every 6 ms) and the request ones one every 3 s while the requests travel, so a figure
 * read after earlier requests is bounded by the refill the measured elapsed time allows.
 *
 * A request's headers are written before its settle: they show its reservation. The settle lands
 * when the response has finished (or closed), so each test waits for it to show in
 * `RateLimiterService.usage` before it reads what the next request's headers say.
 */

const run = randomUUID();
const apiKey = (name: string): string => `${name}-${run}`;

/** The fake model's pace here, tokens a second. */
const TOKENS_PER_SECOND = 5_000;
/** Ms for one token of the 'tpm' bucket to come back (10,000 a minute). */
const MS_PER_TOKEN = 60_000 / 10_000;

/** The fake model's answer to "count to n": `1 2 … n`. */
const counted = (n: number): string => Array.from({ length: n }, (_, i) => i + 1).join(' ');

/** A chat completion request's body, of one user message. */
const ask = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'fake-gpt',
  messages: [{ role: 'user', content }],
  ...extra,
});

/** A request that reserves 2 tokens (a 1-token prompt, `max_tokens: 1`) and uses 2. */
const SMALL = ask('hi', { max_tokens: 1 });

/** A response, its body read and parsed. */
interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
}

/** A streamed response: its chunks as they came, and whether `[DONE]` ended it. */
interface Streamed {
  status: number;
  headers: Headers;
  chunks: ChatCompletionChunk[];
  done: boolean;
}

/** `x-ratelimit-remaining-tokens`: the tokens the key's 'tpm' bucket held once the request's reservation was taken. */
const tokensLeft = (reply: { headers: Headers }): number => Number(reply.headers.get('x-ratelimit-remaining-tokens'));

/** The chunks that carry a token of the answer. */
const tokenChunks = (chunks: ChatCompletionChunk[]) => chunks.filter((c) => c.choices[0]?.delta.content);

/** `actual` is `expected` plus what the 'tpm' bucket can have refilled in `elapsedMs`. */
function expectRefilled(actual: number, expected: number, elapsedMs: number): void {
  expect(actual).toBeGreaterThanOrEqual(expected);
  expect(actual).toBeLessThanOrEqual(expected + Math.floor(elapsedMs / MS_PER_TOKEN) + 1);
}

const stores: Array<[string, (() => string) | undefined]> = [
  ['memory store', undefined],
  ['Redis store (REDIS_URL)', testRedisUrl],
];

describe.each(stores)('sample chat completions, %s', (_name, redisUrl) => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    // the sample reads REDIS_URL when the module initialises, so set it just for the boot
    const saved = process.env.REDIS_URL;
    if (redisUrl) process.env.REDIS_URL = redisUrl();
    else delete process.env.REDIS_URL;
    try {
      const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
        .overrideProvider(FakeModel)
        .useValue(new FakeModel(TOKENS_PER_SECOND))
        .compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.listen(0, '127.0.0.1');
    } finally {
      if (saved === undefined) delete process.env.REDIS_URL;
      else process.env.REDIS_URL = saved;
    }
    url = `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/v1/chat/completions`;
  });

  afterAll(async () => {
    await app?.close();
  });

  /** A JSON chat completion (`"stream": false`). */
  async function chat(headers: Record<string, string>, body: object): Promise<Reply> {
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    return {
      status: response.status,
      headers: response.headers,
      body: text ? (JSON.parse(text) as unknown) : undefined,
    };
  }

  /** A streamed chat completion, read chunk by chunk; with `leaveAfter`, the client goes away once that many tokens came. */
  async function stream(headers: Record<string, string>, body: object, leaveAfter?: number): Promise<Streamed> {
    const leave = new AbortController();
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
      signal: leave.signal,
    });
    const streamed: Streamed = { status: response.status, headers: response.headers, chunks: [], done: false };
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
      for (let end = text.indexOf('\n\n'); end !== -1; end = text.indexOf('\n\n')) {
        const data = text.slice(0, end).replace(/^data: /, '');
        text = text.slice(end + 2);
        if (data === '[DONE]') streamed.done = true;
        else streamed.chunks.push(JSON.parse(data) as ChatCompletionChunk);
      }
      if (leaveAfter !== undefined && tokenChunks(streamed.chunks).length >= leaveAfter) {
        leave.abort();
        break;
      }
    }
    return streamed;
  }

  /** The key's 'tpm' bucket once `landed` says the settle of its last request shows there (within 2 s). */
  async function settled(key: string, landed: (usage: RateLimitUsage) => boolean): Promise<RateLimitUsage> {
    const limiter = app.get(RateLimiterService);
    let usage: RateLimitUsage | undefined;
    await waitUntil(`the settle of ${key}'s request`, 2_000, async () => {
      usage = await limiter.usage(`custom:${key}`, TOKENS_PER_MINUTE);
      return landed(usage) ? '' : `used ${usage.used} of ${usage.limit}`;
    });
    return usage!;
  }

  it('answers a JSON completion with its usage, and settles its tokens at usage.total_tokens, not the estimate', async () => {
    const key = apiKey('json');
    const started = performance.now();
    const first = await chat({ authorization: `Bearer ${key}` }, ask('count to 50', { max_tokens: 500 }));
    expect(first.status).toBe(200);
    expect(first.body as ChatCompletion).toEqual({
      id: expect.stringMatching(/^chatcmpl-/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'fake-gpt',
      choices: [
        { index: 0, message: { role: 'assistant', content: counted(50) }, logprobs: null, finish_reason: 'stop' },
      ],
      usage: { prompt_tokens: 3, completion_tokens: 50, total_tokens: 53 },
    });
    expect(first.headers.get('ratelimit-policy')).toBe(
      '"global";q=200;w=2, "rpm";q=20;w=60, "tpm";q=10000;w=60;qu="tokens"',
    );
    // written before the settle: the reservation, prompt (3) + max_tokens (500)
    expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('10000');
    expect(tokensLeft(first)).toBe(10_000 - 503);
    expect(first.headers.get('x-ratelimit-reset-tokens')).toMatch(/^\d+s$/);
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('20');
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('19');

    await settled(key, ({ used }) => used < (503 + 53) / 2);
    // the same key, as x-api-key: the 450 tokens not used were given back
    const next = await chat({ 'x-api-key': key }, SMALL);
    expect(next.status).toBe(200);
    expectRefilled(tokensLeft(next), 10_000 - 53 - 2, performance.now() - started);
  });

  it('charges a streamed completion the tokens it streamed', async () => {
    const key = apiKey('stream');
    const started = performance.now();
    const streamed = await stream({ authorization: `Bearer ${key}` }, ask('count to 200', { max_tokens: 1000 }));
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(tokensLeft(streamed)).toBe(10_000 - 1003);
    const [role, ...rest] = streamed.chunks;
    expect(role).toMatchObject({ object: 'chat.completion.chunk', choices: [{ delta: { role: 'assistant' } }] });
    expect(
      tokenChunks(rest)
        .map((c) => c.choices[0].delta.content)
        .join(''),
    ).toBe(counted(200));
    expect(rest.slice(-2)).toEqual([
      expect.objectContaining({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] }),
      expect.objectContaining({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 200, total_tokens: 203 } }),
    ]);
    expect(streamed.done).toBe(true);

    await settled(key, ({ used }) => used < (1003 + 203) / 2);
    expectRefilled(tokensLeft(await chat({ 'x-api-key': key }, SMALL)), 10_000 - 203 - 2, performance.now() - started);
  });

  it('charges a client that goes away mid-stream what was produced until it left', async () => {
    const key = apiKey('gone');
    const started = performance.now();
    const cut = await stream({ 'x-api-key': key }, ask('count to 5000', { max_tokens: 4000 }), 20);
    expect(cut.status).toBe(200);
    expect(tokensLeft(cut)).toBe(10_000 - 4004);
    const received = tokenChunks(cut.chunks).length;
    expect(cut.done).toBe(false);

    await settled(key, ({ used }) => used < 4004 / 2);
    const next = await chat({ 'x-api-key': key }, SMALL);
    const elapsed = performance.now() - started;
    // charged = 10,000 - 2 (the next reservation) - what the next request saw left + the refill meanwhile
    const charged = 10_000 - 2 - tokensLeft(next);
    // at least the prompt (4) and every token that arrived; at most what the model made while the stream ran
    expect(charged + Math.floor(elapsed / MS_PER_TOKEN) + 1).toBeGreaterThanOrEqual(4 + received);
    expect(charged).toBeLessThanOrEqual(4 + Math.ceil((elapsed * TOKENS_PER_SECOND) / 1000) + 1);
  });

  it('gives a request the handler refuses its reservation back (an unknown model: 404)', async () => {
    const key = apiKey('error');
    const started = performance.now();
    const refused = await chat({ 'x-api-key': key }, ask('count to 50', { model: 'gpt-4o', max_tokens: 500 }));
    expect(refused.status).toBe(404);
    expect(tokensLeft(refused)).toBe(10_000 - 503);

    await settled(key, ({ used }) => used < 503 / 2);
    expectRefilled(tokensLeft(await chat({ 'x-api-key': key }, SMALL)), 10_000 - 2, performance.now() - started);
  });

  it('refuses the 21st request of a minute with 429 and Retry-After (rpm)', async () => {
    const key = apiKey('rpm');
    const started = performance.now();
    const replies = await Promise.all(Array.from({ length: 21 }, () => chat({ 'x-api-key': key }, SMALL)));
    const elapsed = performance.now() - started;
    const refused = replies.filter(({ status }) => status === 429);
    // a request's worth comes back every 3 s: 20 at once, and one more per 3 s the burst took
    expect(21 - refused.length).toBeGreaterThanOrEqual(20);
    expect(21 - refused.length).toBeLessThanOrEqual(20 + Math.floor(elapsed / 3_000));
    expect(refused.length).toBeGreaterThanOrEqual(1);
    const [refusal] = refused;
    const retryAfter = Number(refusal.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(3);
    expect(refusal.body).toMatchObject({ statusCode: 429, policy: 'rpm', retryAfter });
    expect(refusal.headers.get('x-ratelimit-remaining-requests')).toBe('0');
  });

  it('goes into debt when an answer overruns its estimate, and refuses until time pays it back', async () => {
    const key = apiKey('debt');
    const started = performance.now();
    // no max_tokens: 500 reserved for the answer (504 with the prompt), 12,000 used
    const long = await chat({ 'x-api-key': key }, ask('count to 12000'));
    expect(long.status).toBe(200);
    expect((long.body as ChatCompletion).usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: 12_000,
      total_tokens: 12_004,
    });
    expect(tokensLeft(long)).toBe(10_000 - 504);

    expect(await settled(key, ({ remaining }) => remaining === 0)).toMatchObject({ remaining: 0, limit: 10_000 });
    const refused = await chat({ 'x-api-key': key }, ask('hi', { max_tokens: 500 }));
    const elapsed = performance.now() - started;
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ statusCode: 429, policy: 'tpm' });
    expect(tokensLeft(refused)).toBe(0);
    // 2,004 tokens of debt, then the 501 it asks for, at one token per 6 ms: about 15 s
    const retryAfter = Number(refused.headers.get('retry-after'));
    const wait = ((2_004 + 501) * MS_PER_TOKEN) / 1000;
    expect(retryAfter).toBeGreaterThanOrEqual(Math.floor(wait - elapsed / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil(wait));
    expect((refused.body as { retryAfter: number }).retryAfter).toBe(retryAfter);
  });

  it('reports the debt in usage(): used above the limit until it is paid back', async () => {
    const key = apiKey('usage');
    await chat({ 'x-api-key': key }, ask('count to 12000'));
    const usage = await settled(key, ({ remaining }) => remaining === 0);
    // 12,004 taken, less what came back since (a token per 6 ms)
    expect(usage.used).toBeGreaterThan(11_000);
  });

  it("cuts a stream short once the key's budget is spent (the meter's signal): finish_reason 'length'", async () => {
    const key = apiKey('budget');
    const spent = await chat({ 'x-api-key': key }, ask('count to 9000'));
    expect((spent.body as ChatCompletion).usage.total_tokens).toBe(9_004);
    await settled(key, ({ used }) => used > 5_000);

    // 504 reserved (a 4-token prompt, 500 for the answer) out of the ~1,000 left
    const cut = await stream({ 'x-api-key': key }, ask('count to 5000'));
    expect(cut.status).toBe(200);
    const left = tokensLeft(cut);
    expect(left).toBeGreaterThanOrEqual(10_000 - 9_004 - 504);
    expect(left).toBeLessThan(1_000);
    // the meter's signal aborts once what was counted beyond the reservation has used what was left
    const [end, usage] = cut.chunks.slice(-2);
    expect(end.choices[0].finish_reason).toBe('length');
    expect(usage.usage?.total_tokens).toBe(504 + left);
    expect(tokenChunks(cut.chunks)).toHaveLength(504 + left - 4);
    expect(cut.done).toBe(true);
  });
});
