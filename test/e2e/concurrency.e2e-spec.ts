/**
 * `algorithm: 'concurrency'` end to end: `@RateLimit({ name: 'exports', algorithm: 'concurrency',
 * limit: 2, ... })` on real servers, the memory store and a real Redis.
 *
 * The handlers hold their request open until the test ends it (`holds`, see
 * `test/support/concurrency-apps.ts`) and count themselves in flight; a test waits for the engine's
 * release of a slot (`watchReleases`), never for time:
 * - HTTP (Express, Fastify): at most 2 in flight, the third refused with `Retry-After: 1` and the
 *   `concurrent-requests` headers; a slot comes back when a request finishes, fails (500, 400),
 *   loses its client, or streams its answer to the end or until its client goes, and each time a
 *   new request is admitted;
 * - GraphQL (Apollo), a socket.io gateway, a TCP microservice: the same limit, and a slot back
 *   when the resolver or message handler ends, with an answer or an error;
 * - two app processes on one Redis (`test/support/processes/concurrency-app.ts`): never more than
 *   2 handlers in flight across both (counted in Redis by the handlers), every request admitted or
 *   refused; a process killed while it holds slots leaks them for the lease and no longer.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, type ClientRequest, type IncomingMessage, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Module } from '@nestjs/common';
import { RateLimitModule } from '../../lib/index.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import {
  type Ending,
  ExportsController,
  ExportsGateway,
  ExportsMessages,
  holds,
  newId,
  settledCount,
  startGraphqlExports,
  STORES,
  type StoreName,
  storeOptions,
  watchReleases,
} from '../support/concurrency-apps.js';
import { startGatewayApp } from '../support/gateway-apps.js';
import { startMicroservice } from '../support/microservice-apps.js';
import { buildApp } from '../support/processes/build-app.js';
import { testRedisUrl, useTestRedis } from '../support/redis/test-redis.js';

const redis = useTestRedis();

/** What a refusal of `exports` says in headers: a slot may come back any moment, so 1 s. */
const REFUSAL_HEADERS = {
  'retry-after': '1',
  'ratelimit-policy': '"exports";q=2;qu="concurrent-requests"',
  ratelimit: '"exports";r=0;t=1',
};

/** A fresh client: a test's slots are its own. */
const newClient = (): string => `client-${randomUUID()}`;

/** A GET sent with node:http, so the test can hang up whenever it likes. */
interface RawRequest {
  request: ClientRequest;
  /** The response, once its head arrived. */
  response: Promise<IncomingMessage>;
}

function rawGet(url: string, path: string, client: string): RawRequest {
  const { hostname, port } = new URL(url);
  const req = request({ host: hostname, port, path, agent: false, headers: { 'x-client': client } });
  // the test hangs up on purpose: the error that follows is expected
  req.on('error', () => undefined);
  const response = new Promise<IncomingMessage>((resolve) => req.once('response', resolve));
  req.end();
  return { request: req, response };
}

/** A response's body, read to its end. */
async function bodyOf(response: IncomingMessage): Promise<string> {
  let body = '';
  for await (const chunk of response) body += String(chunk);
  return body;
}

// ---------------------------------------------------------------------------------------------
// HTTP

describe.each(ADAPTERS)('concurrency on %s', (adapter) => {
  describe.each(STORES)('%s store', (storeName: StoreName) => {
    let http: TestApp;
    let releases: ReturnType<typeof watchReleases>;

    beforeAll(async () => {
      @Module({ imports: [RateLimitModule.forRoot(storeOptions(storeName, redis))], controllers: [ExportsController] })
      class AppModule {}
      http = await startApp(AppModule, adapter);
      releases = watchReleases(http.app);
    });
    afterAll(() => http.close());

    const get = async (id: string, client: string) => read(await http.get(`/exports?id=${id}`, { 'x-client': client }));

    it('holds at most 2 in flight of 5 sent at once; the 3 others get 429 with Retry-After: 1 and the slot headers', async () => {
      const client = newClient();
      holds.resetMax();
      const ids = Array.from({ length: 5 }, newId);
      const answers = ids.map((id) => get(id, client));
      const entered = ids.map((id) => holds.entered(id));
      // 3 refusals answered, or a third handler running: whichever comes first
      await Promise.race([settledCount(answers, 3), settledCount(entered, 3)]);
      const settled = await Promise.all(answers.map((answer) => Promise.race([answer, Promise.resolve(undefined)])));
      const held = ids.filter((_, i) => settled[i] === undefined);
      expect(held).toHaveLength(2);
      for (const refusal of settled.filter((answer) => answer !== undefined)) {
        expect(refusal.status).toBe(429);
        expect(refusal.headers).toMatchObject(REFUSAL_HEADERS);
        expect(refusal.body).toMatchObject({ statusCode: 429, policy: 'exports', retryAfter: 1 });
      }
      await Promise.all(held.map((id) => holds.entered(id)));
      expect([holds.inFlight, holds.max]).toEqual([2, 2]);

      const before = releases.count;
      for (const id of held) holds.end(id);
      const statuses = (await Promise.all(answers)).map((answer) => answer.status);
      expect(statuses.sort()).toEqual([200, 200, 429, 429, 429]);
      await releases.released(before + 2);
      expect(holds.max).toBe(2);
    });

    it('gives a slot back when a request finishes, fails (500, 400), loses its client, or streams to the end or until its client goes; a new request is admitted after each', async () => {
      const client = newClient();
      let released = releases.count;
      /** Both slots are taken: another request is refused. */
      const full = async () => {
        const probe = await get(newId(), client);
        expect([probe.status, probe.headers.ratelimit]).toEqual([429, REFUSAL_HEADERS.ratelimit]);
      };

      // one slot is held through the whole test: each way below frees the other one
      const holder = newId();
      const holding = get(holder, client);
      await holds.entered(holder);

      // finish, handler error, HttpException: each ends a request that holds the other slot
      const endings: Array<[Ending, number]> = [
        ['ok', 200],
        ['error', 500],
        ['bad-request', 400],
      ];
      for (const [ending, status] of endings) {
        const id = newId();
        const answer = get(id, client);
        // admitted: the slot the previous way gave back is free again
        await holds.entered(id);
        await full();
        holds.end(id, ending);
        const ended = await answer;
        expect([ending, ended.status, ended.headers.ratelimit]).toEqual([ending, status, '"exports";r=0;t=1']);
        await releases.released(++released);
      }

      // the client hangs up while the handler still runs: the slot comes back before the handler ends
      const abandoned = newId();
      const abort = rawGet(http.url, `/exports?id=${abandoned}`, client);
      await holds.entered(abandoned);
      await full();
      abort.request.destroy();
      await releases.released(++released);
      expect(holds.inFlight).toBe(2);

      // a stream whose client hangs up after the first chunk
      const cut = newId();
      const cutStream = rawGet(http.url, `/exports/stream?id=${cut}`, client);
      const cutBody = await holds.stream(cut);
      await full();
      cutBody.write('first chunk\n');
      const cutResponse = await cutStream.response;
      expect(cutResponse.statusCode).toBe(200);
      const [chunk] = (await once(cutResponse, 'data')) as [Buffer];
      expect(String(chunk)).toBe('first chunk\n');
      cutStream.request.destroy();
      await releases.released(++released);

      // a stream that ends
      const whole = newId();
      const wholeStream = rawGet(http.url, `/exports/stream?id=${whole}`, client);
      const wholeBody = await holds.stream(whole);
      await full();
      wholeBody.write('first chunk\n');
      wholeBody.end('last chunk\n');
      const wholeResponse = await wholeStream.response;
      expect([wholeResponse.statusCode, await bodyOf(wholeResponse)]).toEqual([200, 'first chunk\nlast chunk\n']);
      await releases.released(++released);

      // the slot is free again, and the holder's too once it ends
      const last = newId();
      const lastAnswer = get(last, client);
      await holds.entered(last);
      holds.end(last);
      holds.end(holder);
      holds.end(abandoned);
      if (!cutBody.destroyed) cutBody.end();
      const [first, final] = await Promise.all([holding, lastAnswer]);
      expect([first.status, first.headers.ratelimit]).toEqual([200, '"exports";r=1;t=0']);
      expect(final.status).toBe(200);
      await releases.released(released + 2);
      // every admitted request gave its slot back once: the abandoned handler's end gave nothing more
      expect(releases.count).toBe(released + 2);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// GraphQL, socket.io, TCP

/** How a message transport answered one request. */
type Outcome = { kind: 'ok' } | { kind: 'error' } | { kind: 'refused'; detail: unknown };

interface Transport {
  /** Sends request `id` for `client`, resolves with its answer. */
  call(id: string, client: string): Promise<Outcome>;
  app: Parameters<typeof watchReleases>[0];
  close(): Promise<void>;
}

const TRANSPORTS: Array<[string, (store: StoreName) => Promise<Transport>, unknown]> = [
  [
    'GraphQL (Apollo)',
    async (store) => {
      const app = await startGraphqlExports(storeOptions(store, redis));
      return {
        app: app.app,
        close: () => app.close(),
        async call(id, client) {
          const { headers, body } = await app.post(`{ exportReport(id: "${id}") }`, { 'x-client': client });
          if (body.data?.exportReport === id) return { kind: 'ok' };
          const extensions = body.errors?.[0]?.extensions;
          if (extensions?.code !== 'RATE_LIMITED') return { kind: 'error' };
          const header = (name: string) => headers.get(name);
          return {
            kind: 'refused',
            detail: {
              extensions,
              headers: Object.fromEntries(Object.keys(REFUSAL_HEADERS).map((name) => [name, header(name)])),
            },
          };
        },
      };
    },
    {
      extensions: expect.objectContaining({ code: 'RATE_LIMITED', policy: 'exports', retryAfter: 1 }) as unknown,
      headers: REFUSAL_HEADERS,
    },
  ],
  [
    'socket.io gateway',
    async (store) => {
      @Module({ imports: [RateLimitModule.forRoot(storeOptions(store, redis))], providers: [ExportsGateway] })
      class GatewayModule {}
      const app = await startGatewayApp(GatewayModule, 'socket.io');
      return {
        app: app.app,
        close: () => app.close(),
        async call(id, client) {
          // a connection per request: the answers of one come in order
          const socket = await app.connect();
          const received = await socket.ask('export', { id, client });
          if (received.event === 'exported') return { kind: 'ok' };
          const data: unknown = received.data;
          return (data as { statusCode?: number } | undefined)?.statusCode === 429
            ? { kind: 'refused', detail: data }
            : { kind: 'error' };
        },
      };
    },
    expect.objectContaining({ status: 'error', statusCode: 429, policy: 'exports', retryAfter: 1 }),
  ],
  [
    'TCP microservice',
    async (store) => {
      @Module({ imports: [RateLimitModule.forRoot(storeOptions(store, redis))], controllers: [ExportsMessages] })
      class MicroserviceModule {}
      const service = await startMicroservice(MicroserviceModule);
      return {
        app: { get: (type: never) => service.get(type) } as unknown as Transport['app'],
        close: () => service.close(),
        call: (id, client) =>
          service.send('export', { id, client }).then(
            (): Outcome => ({ kind: 'ok' }),
            (error: { statusCode?: number }): Outcome =>
              error?.statusCode === 429 ? { kind: 'refused', detail: error } : { kind: 'error' },
          ),
      };
    },
    expect.objectContaining({ status: 'error', statusCode: 429, policy: 'exports', retryAfter: 1 }),
  ],
];

describe.each(TRANSPORTS)('concurrency on a %s', (_name, start, refusal) => {
  describe.each(STORES)('%s store', (storeName) => {
    let transport: Transport;
    let releases: ReturnType<typeof watchReleases>;

    beforeAll(async () => {
      transport = await start(storeName);
      releases = watchReleases(transport.app);
    });
    afterAll(() => transport.close());

    it('holds 2 in flight, refuses the third, and gives a slot back when a handler ends with an answer or an error', async () => {
      const client = newClient();
      holds.resetMax();
      let released = releases.count;
      const [a, b, c, d] = Array.from({ length: 4 }, newId);
      const refused = async () =>
        expect(await transport.call(newId(), client)).toEqual({ kind: 'refused', detail: refusal });

      const answerA = transport.call(a, client);
      await holds.entered(a);
      const answerB = transport.call(b, client);
      await holds.entered(b);
      await refused();
      expect([holds.inFlight, holds.max]).toEqual([2, 2]);

      // an answer gives the slot back: another request is admitted
      holds.end(a);
      expect(await answerA).toEqual({ kind: 'ok' });
      await releases.released(++released);
      const answerC = transport.call(c, client);
      await holds.entered(c);
      await refused();

      // so does an error
      holds.end(b, 'error');
      expect(await answerB).toEqual({ kind: 'error' });
      await releases.released(++released);
      const answerD = transport.call(d, client);
      await holds.entered(d);
      await refused();

      holds.end(c);
      holds.end(d, 'error');
      expect([await answerC, await answerD]).toEqual([{ kind: 'ok' }, { kind: 'error' }]);
      await releases.released(released + 2);
      expect(releases.count).toBe(released + 2);
      expect(holds.max).toBe(2);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Two processes on one Redis

/** The lease of the processes' `/leased` route, in seconds: what a killed process's slots outlive it by. */
const LEASE_SECONDS = 3;
const LEASE_MS = LEASE_SECONDS * 1000;
/** Store times are whole ms (and the Redis clock may be read a ms apart from the test's). */
const CLOCK_SLOP_MS = 5;
/** Clients sending at once in the churn test, and how many admissions it waits for (at most how many requests). */
const CHURN_WORKERS = 40;
const CHURN_ADMITTED = 40;
const CHURN_MAX_SENT = 20_000;

interface ConcurrencyProcess {
  port: number;
  child: ChildProcessWithoutNullStreams;
  /** Resolves with the in-flight count a `hold=gate` handler found on entry, once it prints it. */
  entered(id: string): Promise<number>;
  stderr(): string;
  stop(): Promise<void>;
}

const running = new Set<ChildProcessWithoutNullStreams>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

async function startProcess(entry: string, env: Record<string, string>): Promise<ConcurrencyProcess> {
  // the child needs no --experimental-vm-modules (it would only print a warning on stderr)
  const { NODE_OPTIONS: _jestOptions, ...inherited } = process.env;
  const child = spawn(process.execPath, [entry], { env: { ...inherited, ...env }, stdio: 'pipe' });
  running.add(child);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => running.delete(child));
  const entries = new Map<string, { promise: Promise<number>; resolve: (inFlight: number) => void }>();
  const entryOf = (id: string) => {
    let entry = entries.get(id);
    if (entry === undefined) {
      let resolve!: (inFlight: number) => void;
      const promise = new Promise<number>((settle) => (resolve = settle));
      entries.set(id, (entry = { promise, resolve }));
    }
    return entry;
  };
  const port = await new Promise<number>((resolve, reject) => {
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    const onExit = (code: number | null, signal: string | null) =>
      fail(new Error(`concurrency-app exited (${code ?? signal}) before it listened:\n${stderr}`));
    const timer = setTimeout(() => fail(new Error(`concurrency-app did not listen within 30 s:\n${stderr}`)), 30_000);
    child.once('exit', onExit);
    createInterface({ input: child.stdout }).on('line', (line) => {
      let message: { port?: unknown; entered?: unknown; inFlight?: unknown };
      try {
        message = JSON.parse(line) as typeof message;
      } catch {
        return;
      }
      if (typeof message.entered === 'string') entryOf(message.entered).resolve(message.inFlight as number);
      if (typeof message.port !== 'number') return;
      clearTimeout(timer);
      child.off('exit', onExit);
      resolve(message.port);
    });
  });
  return {
    port,
    child,
    entered: (id) => entryOf(id).promise,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

const agent = new Agent({ keepAlive: true, maxSockets: 120 });

/** A GET to a process: its status and parsed body, or the client error it ended with. */
function processGet(
  port: number,
  path: string,
  client: string,
  method = 'GET',
): Promise<{ status: number | string; body?: any }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, method, agent, headers: { 'x-client': client } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.once('end', () => {
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode ?? 'no status', body });
      });
      res.once('error', (error) => resolve({ status: `response error ${error.message}` }));
    });
    req.once('error', (error: NodeJS.ErrnoException) =>
      resolve({ status: `request error ${error.code ?? error.message}` }),
    );
    req.end();
  });
}

describe('concurrency across 2 processes on one Redis', () => {
  let buildDir: string | undefined;
  const apps: ConcurrencyProcess[] = [];
  const prefix = `rl-e2e-cc-${randomUUID()}:`;

  beforeAll(async () => {
    buildDir = await mkdtemp(join(tmpdir(), 'rl-concurrency-processes-'));
    const entry = await buildApp(buildDir, 'test/support/processes/concurrency-app.ts');
    const env = { REDIS_URL: testRedisUrl(), RATE_LIMIT_PREFIX: prefix, LEASE_SECONDS: String(LEASE_SECONDS) };
    const started = await Promise.allSettled([startProcess(entry, env), startProcess(entry, env)]);
    for (const outcome of started) if (outcome.status === 'fulfilled') apps.push(outcome.value);
    const failure = started.find((outcome) => outcome.status === 'rejected');
    if (failure) throw failure.reason;
  }, 60_000);

  afterAll(async () => {
    agent.destroy();
    await Promise.all(apps.map((app) => app.stop()));
    if (buildDir) await rm(buildDir, { recursive: true, force: true });
  }, 30_000);

  /** The in-flight count the handlers keep for `client` in Redis. */
  const inFlightOf = async (client: string) => Number((await redis().get(`${prefix}in-flight:${client}`)) ?? 0);

  it('20 held requests at once, 10 to each process: 2 admitted across both, 18 refused', async () => {
    const client = newClient();
    const sent = Array.from({ length: 20 }, (_, i) => ({ id: newId(), app: apps[i % 2] }));
    const answers = sent.map(({ id, app }) => processGet(app.port, `/exports?hold=gate&id=${id}`, client));
    const entered = sent.map(({ id, app }) => app.entered(id));
    await Promise.race([settledCount(answers, 18), settledCount(entered, 3)]);
    const settled = await Promise.all(answers.map((answer) => Promise.race([answer, Promise.resolve(undefined)])));
    const held = sent.filter((_, i) => settled[i] === undefined);
    expect(held).toHaveLength(2);
    expect(settled.filter((answer) => answer !== undefined).map((answer) => answer.status)).toEqual(
      Array(18).fill(429),
    );
    // each held handler found itself the first or the second in flight, across both processes
    const counts = await Promise.all(held.map(({ id, app }) => app.entered(id)));
    expect(counts.sort()).toEqual([1, 2]);
    expect(await inFlightOf(client)).toBe(2);

    await Promise.all(apps.map((app) => processGet(app.port, '/release', client, 'POST')));
    const statuses = (await Promise.all(answers)).map((answer) => answer.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(2);
    expect(await inFlightOf(client)).toBe(0);
  });

  it(`${CHURN_WORKERS} clients at once, half to each process, each sending request after request until ${CHURN_ADMITTED} are admitted: never more than 2 handlers in flight across both; admitted + refused = sent`, async () => {
    const client = newClient();
    const tally = { sent: 0, admitted: 0, refused: 0, others: [] as Array<number | string>, maxInFlight: 0 };
    const worker = async (port: number) => {
      while (tally.admitted < CHURN_ADMITTED && tally.sent < CHURN_MAX_SENT) {
        tally.sent++;
        const answer = await processGet(port, `/exports?hold=work&id=${tally.sent}`, client);
        if (answer.status === 429) tally.refused++;
        else if (answer.status !== 200) tally.others.push(answer.status);
        else {
          tally.admitted++;
          tally.maxInFlight = Math.max(tally.maxInFlight, (answer.body as { inFlight: number }).inFlight);
        }
      }
    };
    await Promise.all(Array.from({ length: CHURN_WORKERS }, (_, i) => worker(apps[i % 2].port)));
    const { sent, admitted, refused, others, maxInFlight } = tally;
    expect({
      stderr: apps.map((app) => app.stderr()).join(''),
      others,
      inFlightAfter: await inFlightOf(client),
    }).toEqual({
      stderr: '',
      others: [],
      inFlightAfter: 0,
    });
    expect(admitted + refused).toBe(sent);
    // slots came back and were taken again, across both processes, many times over
    expect(admitted).toBeGreaterThanOrEqual(CHURN_ADMITTED);
    expect(maxInFlight).toBeGreaterThanOrEqual(1);
    expect(maxInFlight).toBeLessThanOrEqual(2);
  });

  it(`a process killed while it holds both slots leaks them for the lease (${LEASE_SECONDS} s), then the other admits`, async () => {
    const [doomed, survivor] = apps;
    const client = newClient();
    const ids = [newId(), newId()];
    const sentAt = Date.now();
    const held = ids.map((id) => processGet(doomed.port, `/leased?hold=gate&id=${id}`, client));
    await Promise.all(ids.map((id) => doomed.entered(id)));
    const enteredAt = Date.now();

    const killed = once(doomed.child, 'exit');
    doomed.child.kill('SIGKILL');
    await killed;
    // its clients see their connections drop: no answer
    expect((await Promise.all(held)).map((answer) => typeof answer.status)).toEqual(['string', 'string']);

    // the survivor refuses while the dead process's slots are held, until their lease ends
    const probes: Array<{ sentAt: number; answeredAt: number; status: number | string }> = [];
    const deadline = enteredAt + LEASE_MS + 5_000;
    for (;;) {
      const probeSentAt = Date.now();
      const { status } = await processGet(survivor.port, `/leased?hold=work&id=${newId()}`, client);
      probes.push({ sentAt: probeSentAt, answeredAt: Date.now(), status });
      if (status !== 429 || Date.now() > deadline) break;
      // measured below: how long after the lease's end the first admission came
      await sleep(50);
    }
    const admitted = probes[probes.length - 1];
    const refused = probes.slice(0, -1);
    expect(admitted.status).toBe(200);
    expect(refused.every((probe) => probe.status === 429)).toBe(true);
    // the first probe went out right after the kill, well inside the lease: refused
    expect(refused.length).toBeGreaterThan(0);
    // no sooner than the lease after the slots were taken (they were taken after `sentAt`)
    expect(admitted.answeredAt - sentAt).toBeGreaterThanOrEqual(LEASE_MS - CLOCK_SLOP_MS);
    // and refused only while a slot could still be held (they were taken before `enteredAt`): so
    // the first probe sent after the lease ended was admitted, however long probes took to answer
    expect(Math.max(...refused.map((probe) => probe.sentAt)) - enteredAt).toBeLessThan(LEASE_MS + CLOCK_SLOP_MS);
  }, 30_000);
});
