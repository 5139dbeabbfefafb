/**
 * Two app processes on one Redis never admit more than the limit, whichever API they use:
 * - the real `@nestjs/throttler` with `storage: new RateLimitThrottlerStorage({ redis, prefix })`;
 * - `nestjs-ratelimit/throttler` with `ThrottlerModule.forRoot(options, { redis, prefix })`.
 *
 * Each process is `test/support/throttler/throttler-app.ts` (Fastify), `limit: 100` an hour per
 * client. A trial names a fresh client and fires 200 concurrent requests at EACH process (400
 * together): exactly 100 must be admitted and the other 300 refused with 429, nothing else, in
 * every trial. The apps run `failMode: 'closed'`, so a store fault would show as a 5xx.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { buildApp } from '../support/processes/build-app.js';
import { testRedisUrl } from '../support/redis/test-redis.js';

const PROCESSES = 2;
const PER_PROCESS = 200;
const LIMIT = 100;
const TRIALS = 5;
const TRIAL_DEADLINE_MS = 20_000;

interface AppProcess {
  port: number;
  stderr(): string;
  stop(): Promise<void>;
}

const running = new Set<ChildProcessWithoutNullStreams>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** Starts the built app with `env`; resolves with its port once it prints it. */
function startProcess(entry: string, env: Record<string, string>): Promise<AppProcess> {
  // the child needs no --experimental-vm-modules
  const { NODE_OPTIONS: _jestOptions, ...inherited } = process.env;
  const child = spawn(process.execPath, [entry], { env: { ...inherited, ...env }, stdio: 'pipe' });
  running.add(child);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => running.delete(child));
  return new Promise((resolve, reject) => {
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    const timer = setTimeout(() => fail(new Error(`throttler-app did not listen within 30 s:\n${stderr}`)), 30_000);
    const onExit = (code: number | null, signal: string | null) =>
      fail(new Error(`throttler-app exited (${code ?? signal}):\n${stderr}`));
    child.once('exit', onExit);
    createInterface({ input: child.stdout }).on('line', (line) => {
      let port: unknown;
      try {
        port = (JSON.parse(line) as { port?: unknown }).port;
      } catch {
        return;
      }
      if (typeof port !== 'number') return;
      clearTimeout(timer);
      child.off('exit', onExit);
      resolve({
        port,
        stderr: () => stderr,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGTERM');
          const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(timer);
        },
      });
    });
  });
}

const agent = new Agent({ keepAlive: true, maxSockets: PER_PROCESS + 10 });

/** Fires PER_PROCESS requests at each port, interleaved, for `client`; counts the outcomes. */
async function trial(ports: number[], client: string): Promise<Record<string, number>> {
  const outcomes: Record<string, number> = {};
  const count = (outcome: string) => (outcomes[outcome] = (outcomes[outcome] ?? 0) + 1);
  const requests: Promise<void>[] = [];
  for (let i = 0; i < PER_PROCESS; i++) {
    for (const port of ports) {
      requests.push(
        new Promise<void>((resolve) => {
          const req = request(
            { host: '127.0.0.1', port, path: '/limited', agent, headers: { 'x-client': client } },
            (res) => {
              res.resume();
              res.once('end', () => resolve(void count(String(res.statusCode))));
              res.once('error', (error) => resolve(void count(`response error ${error.message}`)));
            },
          );
          req.once('error', (error) => resolve(void count(`request error ${error.message}`)));
          req.end();
        }),
      );
    }
  }
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all(requests),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`trial not over in ${TRIAL_DEADLINE_MS} ms`)), TRIAL_DEADLINE_MS);
    }),
  ]).finally(() => clearTimeout(timer));
  return outcomes;
}

let entry: string;
let buildDir: string | undefined;

beforeAll(async () => {
  buildDir = await mkdtemp(join(tmpdir(), 'rl-throttler-processes-'));
  entry = await buildApp(buildDir, 'test/support/throttler/throttler-app.ts');
}, 60_000);

afterAll(async () => {
  agent.destroy();
  if (buildDir) await rm(buildDir, { recursive: true, force: true });
});

describe.each([
  ['nt', '@nestjs/throttler with RateLimitThrottlerStorage'],
  ['ours', 'nestjs-ratelimit/throttler on Redis'],
] as const)('%s: %s, 2 processes on one Redis', (mode, _label) => {
  const apps: AppProcess[] = [];

  beforeAll(async () => {
    const env = { THROTTLER: mode, REDIS_URL: testRedisUrl(), RATE_LIMIT_PREFIX: `nt-processes-${randomUUID()}:` };
    const started = await Promise.allSettled(Array.from({ length: PROCESSES }, () => startProcess(entry, env)));
    for (const outcome of started) if (outcome.status === 'fulfilled') apps.push(outcome.value);
    const failure = started.find((outcome) => outcome.status === 'rejected');
    if (failure) throw failure.reason;
  }, 60_000);

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()));
  }, 30_000);

  it(
    `${PER_PROCESS} concurrent requests to each process admit exactly ${LIMIT}, in ${TRIALS} of ${TRIALS} trials`,
    async () => {
      const ports = apps.map((app) => app.port);
      const results = [];
      for (let i = 0; i < TRIALS; i++) results.push(await trial(ports, `client-${randomUUID()}`));
      const stderr = apps.map((app) => app.stderr()).join('');
      expect({ stderr, results }).toEqual({
        stderr: '',
        results: results.map(() => ({ '200': LIMIT, '429': PROCESSES * PER_PROCESS - LIMIT })),
      });
    },
    TRIALS * TRIAL_DEADLINE_MS,
  );
});
