/**
 * Token budgets across processes: two app processes (`test/support/processes/token-budget-app.ts`,
 * one on Express, one on Fastify, each its own Node process) share one Redis. Each is sent many
 * requests at once on one API key, each with a random real cost (below, at and above the 50
 * reserved up front, and 0); when every settle has landed (each process says so), the bucket's
 * `used` is exactly the sum of the real costs: a settle, whether it takes more or gives back,
 * charges exactly its difference, whichever process made the reservation and whatever the other
 * did meanwhile. The window (10,000,000 tokens an hour from the key's first request) neither
 * fills nor ends during a run.
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { type AppProcess, getJson, startAppProcess, stopAppProcess } from '../support/processes/app-process.js';
import { buildApp } from '../support/processes/build-app.js';
import { testRedisUrl } from '../support/redis/test-redis.js';

/** Requests each process is sent, all at once. */
const PER_PROCESS = 150;
/** The most a request costs in all: up to 8 times its reservation. */
const MOST = 400;
const RESERVED = 50;

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** POSTs `{ tokens }` to `/spend` of the app on `port`: its status. */
function spend(port: number, key: string, tokens: number): Promise<number | string> {
  const body = JSON.stringify({ tokens });
  return new Promise((resolve) => {
    const sent = request(
      {
        host: '127.0.0.1',
        port,
        path: '/spend',
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-api-key': key },
      },
      (response) => {
        response.resume();
        response.once('end', () => resolve(response.statusCode ?? 'no status'));
        response.once('error', (error) => resolve(`response error ${error.message}`));
      },
    );
    sent.once('error', (error: NodeJS.ErrnoException) => resolve(`request error ${error.code ?? error.message}`));
    sent.end(body);
  });
}

describe('token budgets across 2 processes on one Redis', () => {
  let buildDir: string | undefined;
  const apps: AppProcess<{ port: number }>[] = [];

  beforeAll(async () => {
    buildDir = await mkdtemp(join(tmpdir(), 'rl-token-budget-processes-'));
    const entry = await buildApp(buildDir, 'test/support/processes/token-budget-app.ts');
    const env = { REDIS_URL: testRedisUrl(), RATE_LIMIT_PREFIX: `rl-e2e-tb-processes-${randomUUID()}:` };
    const started = await Promise.allSettled(
      ['express', 'fastify'].map((adapter) =>
        startAppProcess<{ port: number }>({
          node: process.execPath,
          cwd: buildDir!,
          entry,
          env: { ...env, ADAPTER: adapter },
        }),
      ),
    );
    for (const outcome of started) if (outcome.status === 'fulfilled') apps.push(outcome.value);
    const failure = started.find((outcome) => outcome.status === 'rejected');
    if (failure) throw failure.reason;
  }, 60_000);

  afterAll(async () => {
    agent.destroy();
    await Promise.all(apps.map((app) => stopAppProcess(app)));
    if (buildDir) await rm(buildDir, { recursive: true, force: true });
  }, 30_000);

  it(`${PER_PROCESS} requests to each process at once, each of a random real cost: the bucket is charged exactly their sum`, async () => {
    // seeded (fast-check's generator): a failing run can be replayed from its seed
    const seed = Date.now() >>> 0;
    const key = `key-${randomUUID()}`;
    // 0, exactly the reservation, and random costs below and above it
    const costs = [
      0,
      RESERVED,
      ...fc.sample(fc.integer({ min: 0, max: MOST }), { seed, numRuns: 2 * PER_PROCESS - 2 }),
    ];
    const ports = apps.map((app) => app.ready.port);
    const statuses = await Promise.all(costs.map((tokens, i) => spend(ports[i % 2], key, tokens)));
    expect({ seed, statuses: statuses.filter((status) => status !== 201) }).toEqual({ seed, statuses: [] });

    // each process has answered the settles of its own requests
    const settled = await Promise.all(
      apps.map(async (app) => (await getJson(app.ready.port, `/settled?count=${PER_PROCESS}`)).body),
    );
    expect(settled).toEqual([{ settled: PER_PROCESS }, { settled: PER_PROCESS }]);

    const sum = costs.reduce((total, tokens) => total + tokens, 0);
    const usages = await Promise.all(
      apps.map(async (app) => (await getJson(app.ready.port, `/usage?key=${key}`)).body),
    );
    for (const usage of usages)
      expect({ seed, usage }).toMatchObject({ seed, usage: { used: sum, limit: 10_000_000 } });
    expect(apps.map((app) => app.stderr())).toEqual(['', '']);
  });
});
