/**
 * Exactness across processes: two app processes (`test/support/processes/limited-app.ts`, real
 * NestJS on Fastify, each its own Node process) share one Redis, or one Redis Cluster. For every
 * algorithm, 20 trials: a fresh API key, 200 concurrent requests to EACH process (400 fired
 * together) against `limit: 100` per hour. Exactly 100 are admitted, the other 300 get 429,
 * nothing gets a 503 (the apps run `failMode: 'closed'`, so a store error such as CROSSSLOT
 * would show) or any other status, in 20 of 20 trials.
 *
 * Every request also passes the apps' module-wide loose `per-ip` policy (a sliding log), whose
 * key lies in another hash slot than the API key's. Its sorted set must grow by exactly the
 * number admitted in each trial: a refused request leaves no charge behind (all-or-nothing,
 * across slots on the Cluster).
 *
 * `leaky_bucket` admits 100 too, but an admitted request waits its turn (36 s apart at 100 per
 * hour) before it is answered: there, the first 200 and the 300 refusals are awaited, and the
 * bucket's stored queue must say 100 were charged. Then the clients of the 99 still queued hang
 * up: each gives its turn back, so the queue and the per-IP log go back to the head's 1 charge.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, type ClientRequest, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Cluster, type Redis } from 'ioredis';
import { type Algorithm, RATE_ALGORITHMS } from '../../lib/algorithms/algorithm.types.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { buildApp } from '../support/processes/build-app.js';
import { type OtherClient, OTHER_CLIENTS } from '../support/redis/clients.js';
import { connectTestCluster, connectTestRedis, testClusterNodes, testRedisUrl } from '../support/redis/test-redis.js';

/** The rates, and a quota (as test/support/processes/limited-app.ts limits them); slots in flight: concurrency.e2e. */
const PROCESS_ALGORITHMS: readonly Algorithm[] = [...RATE_ALGORITHMS, 'quota'];

const PROCESSES = 2;
const PER_PROCESS = 200;
const TOTAL = PROCESSES * PER_PROCESS;
/** The apps' `limit` (per hour, so nothing refills during a trial). */
const LIMIT = 100;
const WINDOW_MS = 3_600_000;
const TRIALS = 20;
/** Trials per algorithm through node-redis and iovalkey. */
const OTHER_CLIENT_TRIALS = 5;
/** Longest a trial may take before it fails (it takes a fraction of a second). */
const TRIAL_DEADLINE_MS = 20_000;
const LOCALHOST_IDENTITY = 'ip:127.0.0.1';

// ---------------------------------------------------------------------------------------------
// App processes.

interface AppProcess {
  port: number;
  /** Everything it wrote on stderr so far. */
  stderr(): string;
  /** SIGTERM, and SIGKILL if it has not exited 10 s later; says how it ended. */
  stop(): Promise<string>;
}

const running = new Set<ChildProcessWithoutNullStreams>();

/** Starts the app with `env` and waits for its `{"port":n}` line. */
async function startApp(entry: string, env: Record<string, string>): Promise<AppProcess> {
  // the child needs no --experimental-vm-modules (it would only print a warning on stderr)
  const { NODE_OPTIONS: _jestOptions, ...inherited } = process.env;
  const child = spawn(process.execPath, [entry], { env: { ...inherited, ...env }, stdio: 'pipe' });
  running.add(child);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => running.delete(child));

  const port = await new Promise<number>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    const onExit = (code: number | null, signal: string | null) =>
      fail(new Error(`limited-app exited (${code ?? signal}) before it listened. stderr:\n${stderr}`));
    const timer = setTimeout(
      () => fail(new Error(`limited-app did not listen within 30 s. stderr:\n${stderr}`)),
      30_000,
    );
    child.once('exit', onExit);
    lines.on('line', (line) => {
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        return;
      }
      const port = (message as { port?: unknown }).port;
      if (typeof port !== 'number') return;
      clearTimeout(timer);
      child.off('exit', onExit);
      resolve(port);
    });
  });

  return {
    port,
    stderr: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const started = performance.now();
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
        return `exit ${child.exitCode ?? child.signalCode} after ${Math.round(performance.now() - started)} ms`;
      }
      return `had exited (${child.exitCode ?? child.signalCode})`;
    },
  };
}

/** The first lines of a child's stderr, enough to see why (a failing trial can log thousands). */
function shorten(text: string, lines = 10): string {
  const all = text.split('\n');
  return all.length <= lines + 1 ? text : `${all.slice(0, lines).join('\n')}\n... ${all.length - lines} more lines`;
}

/** Last resort: nothing this file started outlives it. */
function killAll(): void {
  for (const child of running) child.kill('SIGKILL');
}
process.once('exit', killAll);

// ---------------------------------------------------------------------------------------------
// Trials.

/** Keep-alive sockets, enough for every request of a trial to be in flight at once. */
const agent = new Agent({ keepAlive: true, maxSockets: PER_PROCESS + 10 });

interface TrialResult {
  /** Requests admitted. */
  admitted: number;
  /** 429 responses. */
  refused: number;
  /** Any other outcome: status codes or client errors. */
  failed: string[];
  /** leaky_bucket: 200 responses that came back at once (the head of the queue). */
  answeredAtOnce?: number;
  /** leaky_bucket: tokens the bucket's stored queue says were charged. */
  queued?: number;
  /** How many entries the per-IP policy's sorted set gained. */
  perIpCharged: number;
  /** leaky_bucket: the queue and the per-IP entries once the clients still queued have hung up. */
  afterLeaving?: { queued: number; perIpCharged: number };
  ms: number;
}

/**
 * Fires `TOTAL` requests on one API key, `PER_PROCESS` to each port, interleaved, and waits for
 * every answer (leaky_bucket: for the refusals and the head of the queue; the rest wait until
 * the caller calls `abandon`).
 */
async function fireTrial(ports: readonly number[], algorithm: Algorithm, apiKey: string) {
  const leaky = algorithm === 'leaky_bucket';
  const path = `/limited/${algorithm}`;
  let ok = 0;
  let refused = 0;
  const failed: string[] = [];
  const inFlight = new Set<ClientRequest>();
  let settle: () => void = () => undefined;
  let over = false;

  const done = () =>
    ok + refused + failed.length === TOTAL || (leaky && ok >= 1 && refused + failed.length >= TOTAL - LIMIT);
  const record = (req: ClientRequest, outcome: number | string) => {
    if (over || !inFlight.delete(req)) return;
    if (outcome === 200) ok++;
    else if (outcome === 429) refused++;
    else failed.push(String(outcome));
    if (done()) settle();
  };

  /** Hangs up on the requests still waiting their turn (leaky_bucket: the servers hold them 36 s apart). */
  const abandon = () => {
    for (const req of inFlight) req.destroy();
  };
  const started = performance.now();
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        const counts = `${ok} x 200, ${refused} x 429, others [${failed.join(', ')}]`;
        reject(new Error(`${algorithm}: trial not over in ${TRIAL_DEADLINE_MS} ms: ${counts}`));
      }, TRIAL_DEADLINE_MS);
      settle = () => {
        clearTimeout(timer);
        resolve();
      };
      for (let i = 0; i < PER_PROCESS; i++) {
        for (const port of ports) {
          const req = request({ host: '127.0.0.1', port, path, agent, headers: { 'x-api-key': apiKey } }, (res) => {
            res.resume();
            res.once('end', () => record(req, res.statusCode ?? 'no status'));
            res.once('error', (error) => record(req, `response error ${error.message}`));
          });
          req.once('error', (error: NodeJS.ErrnoException) =>
            record(req, `request error ${error.code ?? error.message}`),
          );
          inFlight.add(req);
          req.end();
        }
      }
    });
  } catch (error) {
    abandon();
    throw error;
  } finally {
    over = true;
  }
  return { ok, refused, failed, ms: performance.now() - started, abandon };
}

/**
 * The fixed window and the counter's windows are aligned to the clock (Redis `TIME`): a trial
 * must not straddle the hour's boundary, where a fresh window would rightly admit more. Waits
 * out the last seconds before one (a wait to begin a trial, not an assertion; rarely needed).
 */
async function clearOfWindowEdge(redis: Redis | Cluster): Promise<void> {
  const [seconds, micros] = await redis.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const untilEdge = WINDOW_MS - (now % WINDOW_MS);
  if (untilEdge <= TRIAL_DEADLINE_MS) await new Promise((resolve) => setTimeout(resolve, untilEdge + 100));
}

/** What a leaky bucket's stored queue holds, in tokens (`<backlog>|<at>`, see lib/algorithms/gcra.lua.ts). */
async function queuedTokens(redis: Redis | Cluster, key: string): Promise<number> {
  const raw = await redis.get(key);
  if (raw === null) return 0;
  const backlog = Number(raw.split('|')[0]);
  // 36 s per token leave the queue: well under one token during a trial
  return Math.ceil(backlog);
}

async function runTrial(
  topology: Topology,
  ports: readonly number[],
  algorithm: Algorithm,
  apiKey: string,
): Promise<TrialResult> {
  const { redis, prefix } = topology;
  if (algorithm === 'fixed_window' || algorithm === 'sliding_window_counter') await clearOfWindowEdge(redis);
  const perIpKey = bucketKey(prefix, 'per-ip', 'sliding_window_log', LOCALHOST_IDENTITY);
  const perIpBefore = await redis.zcard(perIpKey);
  const { ok, refused, failed, ms, abandon } = await fireTrial(ports, algorithm, apiKey);
  const perIpCharged = async () => (await redis.zcard(perIpKey)) - perIpBefore;
  if (algorithm !== 'leaky_bucket') {
    abandon();
    return { admitted: ok, refused, failed, perIpCharged: await perIpCharged(), ms };
  }

  // The ones still queued were admitted. A refusal means the queue was full, so once the
  // refusals are in, the queue's charges have all been made; on the Cluster, an admitted
  // request's per-IP charge is a call to another slot that may still be on its way: give it
  // a moment to land (the count is then checked; it never goes down).
  let charged = await perIpCharged();
  for (const deadline = performance.now() + 2_000; charged < LIMIT && performance.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    charged = await perIpCharged();
  }
  const queueKey = bucketKey(prefix, 'limited-leaky_bucket', 'leaky_bucket', `api-key:${apiKey}`);
  const queued = await queuedTokens(redis, queueKey);

  // The clients still queued hang up: the servers give their turns back, in both policies (on
  // the Cluster, two hash slots). Wait for the refunds to land, so the next trial's per-IP count
  // starts clean.
  abandon();
  let afterLeaving = { queued, perIpCharged: charged };
  for (const deadline = performance.now() + 5_000; performance.now() < deadline;) {
    afterLeaving = { queued: await queuedTokens(redis, queueKey), perIpCharged: await perIpCharged() };
    if (afterLeaving.queued <= 1 && afterLeaving.perIpCharged <= 1) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    admitted: TOTAL - refused - failed.length,
    refused,
    failed,
    answeredAtOnce: ok,
    queued,
    perIpCharged: charged,
    afterLeaving,
    ms,
  };
}

function expected(algorithm: Algorithm): Omit<TrialResult, 'ms'> {
  const exact: Omit<TrialResult, 'ms'> = { admitted: LIMIT, refused: TOTAL - LIMIT, failed: [], perIpCharged: LIMIT };
  return algorithm === 'leaky_bucket'
    ? { ...exact, answeredAtOnce: 1, queued: LIMIT, afterLeaving: { queued: 1, perIpCharged: 1 } }
    : exact;
}

// ---------------------------------------------------------------------------------------------
// Topologies.

interface Topology {
  name: string;
  /** Trials per algorithm. */
  trials: number;
  /** The app's environment for this topology. */
  env: Record<string, string>;
  redis: Redis | Cluster;
  prefix: string;
  /** A fresh API key for a trial. */
  apiKey(trial: number): Promise<string>;
  close(): Promise<void>;
}

/** The client the apps use (`REDIS_CLIENT`): ioredis, or node-redis or iovalkey with fewer trials (the Lua is the same). */
type ClientKind = 'ioredis' | OtherClient;
const trialsOn = (client: ClientKind) => (client === 'ioredis' ? TRIALS : OTHER_CLIENT_TRIALS);
const onClient = (client: ClientKind) => (client === 'ioredis' ? '' : `, ${client}`);

async function singleRedis(client: ClientKind): Promise<Topology> {
  const redis = await connectTestRedis();
  const prefix = `rl-e2e-processes-${randomUUID()}:`;
  return {
    name: `single Redis${onClient(client)}`,
    trials: trialsOn(client),
    env: { REDIS_URL: testRedisUrl(), RATE_LIMIT_PREFIX: prefix, REDIS_CLIENT: client },
    redis,
    prefix,
    apiKey: async () => `key-${randomUUID()}`,
    close: async () => void (await redis.quit()),
  };
}

/**
 * The Redis Cluster of the global setup (3 masters). Each trial's API key hashes to another slot
 * than the per-IP key, so every request spans two slots; even trials put the two slots on
 * different masters, odd ones on the same master (Redis refuses a multi-key call across slots
 * even there).
 */
async function redisCluster(client: ClientKind): Promise<Topology> {
  const redis = await connectTestCluster();
  const prefix = `rl-e2e-processes-${randomUUID()}:`;
  const masterOf = async (key: string): Promise<{ slot: number; master: string }> => {
    const slot = await redis.cluster('KEYSLOT', key);
    const master = redis.slots[slot]?.[0];
    if (master === undefined) throw new Error(`no master known for slot ${slot}`);
    return { slot, master };
  };
  const perIp = await masterOf(bucketKey(prefix, 'per-ip', 'sliding_window_log', LOCALHOST_IDENTITY));
  return {
    name: `Redis Cluster${onClient(client)}`,
    trials: trialsOn(client),
    env: {
      REDIS_CLUSTER: testClusterNodes()
        .map(({ host, port }) => `${host}:${port}`)
        .join(','),
      RATE_LIMIT_PREFIX: prefix,
      REDIS_CLIENT: client,
    },
    redis,
    prefix,
    async apiKey(trial) {
      const otherMaster = trial % 2 === 0;
      for (let attempt = 0; attempt < 1000; attempt++) {
        const apiKey = `key-${randomUUID()}`;
        const { slot, master } = await masterOf(bucketKey(prefix, 'any', 'token_bucket', `api-key:${apiKey}`));
        if (slot !== perIp.slot && (master !== perIp.master) === otherMaster) return apiKey;
      }
      throw new Error(`no API key found on ${otherMaster ? 'another' : 'the same'} master as the per-IP key`);
    },
    close: async () => void (await redis.quit()),
  };
}

/**
 * Calls of the store (FCALL, EVALSHA, EVAL) and CROSSSLOT errors, summed over the masters (INFO commandstats, errorstats):
 * for the summary. Server-wide, so other suites running at the same time count too; the
 * assertions rely on the apps' answers and stderr instead.
 */
async function serverStats(redis: Redis | Cluster): Promise<{ scriptCalls: number; crossSlot: number }> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  let scriptCalls = 0;
  let crossSlot = 0;
  for (const node of nodes) {
    const info = `${await node.info('commandstats')}\n${await node.info('errorstats')}`;
    for (const [, calls] of info.matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/gm))
      scriptCalls += Number(calls);
    crossSlot += Number(/^errorstat_CROSSSLOT:count=(\d+)/m.exec(info)?.[1] ?? 0);
  }
  return { scriptCalls, crossSlot };
}

const summaries: string[] = [];

let entry: string;
let buildDir: string | undefined;

beforeAll(async () => {
  const started = performance.now();
  buildDir = await mkdtemp(join(tmpdir(), 'rl-processes-'));
  entry = await buildApp(buildDir, 'test/support/processes/limited-app.ts');
  summaries.push(`built limited-app in ${Math.round(performance.now() - started)} ms`);
}, 60_000);

afterAll(async () => {
  agent.destroy();
  killAll();
  if (buildDir) await rm(buildDir, { recursive: true, force: true });
  process.stdout.write(`\nprocesses.e2e-spec:\n${summaries.map((line) => `  ${line}`).join('\n')}\n`);
});

describe.each(
  (['ioredis', ...OTHER_CLIENTS] as const).flatMap((client) => [
    [`single Redis${onClient(client)}`, () => singleRedis(client)] as const,
    [`Redis Cluster${onClient(client)}`, () => redisCluster(client)] as const,
  ]),
)('%s, 2 app processes', (name, makeTopology) => {
  let topology: Topology;
  const apps: AppProcess[] = [];

  beforeAll(async () => {
    topology = await makeTopology();
    const started = await Promise.allSettled(Array.from({ length: PROCESSES }, () => startApp(entry, topology.env)));
    for (const outcome of started) if (outcome.status === 'fulfilled') apps.push(outcome.value);
    const failure = started.find((outcome) => outcome.status === 'rejected');
    if (failure) throw failure.reason;
  }, 60_000);

  afterAll(async () => {
    const stopped = await Promise.all(apps.map((app) => app.stop()));
    summaries.push(`${name}: app processes stopped on SIGTERM: ${stopped.join(', ')}`);
    await topology?.close();
  }, 30_000);

  const trials = name.includes(',') ? OTHER_CLIENT_TRIALS : TRIALS;
  const title = `%s: ${PER_PROCESS} concurrent requests to each process admit exactly ${LIMIT}, in ${trials} of ${trials} trials`;
  it.each(PROCESS_ALGORITHMS)(
    title,
    async (algorithm) => {
      const ports = apps.map((app) => app.port);
      const statsBefore = await serverStats(topology.redis);
      const stderrFrom = apps.map((app) => app.stderr().length);
      const started = performance.now();
      const results: TrialResult[] = [];
      for (let trial = 0; trial < topology.trials; trial++) {
        results.push(await runTrial(topology, ports, algorithm, await topology.apiKey(trial)));
      }
      const seconds = (performance.now() - started) / 1000;
      const statsAfter = await serverStats(topology.redis);
      const admitted = results.map((r) => r.admitted);
      const exact = results.filter(
        (r) => r.admitted === LIMIT && r.failed.length === 0 && r.perIpCharged === LIMIT,
      ).length;
      const range = (values: number[]) => `${Math.min(...values)}-${Math.max(...values)}`;
      const nonRefusals = results.reduce((n, r) => n + r.failed.length, 0);
      summaries.push(
        `${topology.name.padEnd(25)} ${algorithm.padEnd(22)} ${exact}/${topology.trials} trials exact, admitted ${range(admitted)}, ` +
          `per-IP charged ${range(results.map((r) => r.perIpCharged))}, non-429 refusals ${nonRefusals}, ` +
          `trial ${range(results.map((r) => Math.round(r.ms)))} ms, ${seconds.toFixed(1)} s; ` +
          `Redis: ${statsAfter.scriptCalls - statsBefore.scriptCalls} script calls, ` +
          `${statsAfter.crossSlot - statsBefore.crossSlot} CROSSSLOT`,
      );

      // a store error (CROSSSLOT above all) is a 503, and the apps log its cause on stderr
      const stderr = shorten(apps.map((app, i) => app.stderr().slice(stderrFrom[i])).join(''));
      expect(stderr).not.toContain('CROSSSLOT');
      const outcomes = results.map(({ ms: _ms, ...outcome }) => outcome);
      expect({ stderr, outcomes }).toEqual({ stderr: '', outcomes: results.map(() => expected(algorithm)) });
    },
    trials * TRIAL_DEADLINE_MS,
  );
});
