import type { FailMode } from '../../lib/index.js';
import type { AdapterName } from '../support/app.js';
import {
  CORRECT_PROBE,
  droppedInTime,
  keyGroup,
  latency,
  ledger,
  limiterAddedMs,
  type Ledger,
  Load,
  type Outcome,
  pause,
  PROBE_EXTRA,
  PROBE_LIMIT,
  probeStatuses,
  report,
  runQueue,
  Scenario,
  showLedger,
  showRecovery,
  storedCount,
  storedTotal,
  tally,
  TimedGuard,
  TIMEOUT,
  timeToCorrectLimiting,
} from '../support/faults.js';
import { redisCommand } from '../support/redis/client.js';
import { type OtherClient, OTHER_CLIENTS } from '../support/redis/clients.js';
import { freePort, stopRedisServer } from '../support/redis/process.js';

/**
 * Faults under load, one test per fault: Redis killed and restarted on its port, Redis frozen
 * (SIGSTOP) in each failMode, SCRIPT FLUSH and FUNCTION FLUSH while requests flow, and the app started while Redis
 * is down. A steady stream of requests runs through each. Every request must get the failMode
 * outcome (or Redis's decision) with limiter-added latency, timed inside the guard from when its
 * store call left the process, at most timeout + 50 ms; none hung; no unhandled rejection; limiting correct again (decided by Redis,
 * seen in Redis) within 1 s of Redis answering; no NOSCRIPT or missing function reaching a request; and no command
 * that Redis gets to run late (after the fault) charging anything.
 *
 * The OS's run-queue wait is not the limiter's time: the latency and recovery bounds are checked
 * on the measured time minus it, and the latency bound minus, where larger, how late the event
 * loop ran a timer due at the call's timeout (see `limiterAddedMs` in `test/support/faults.ts`).
 */

/**
 * Acceptance: limiter-added latency at most timeout + 50 ms from when the store call left the
 * process, whatever Redis does (the time before it leaves is the app's own work on other requests,
 * which `timeout` does not count: see `TimedGuard`).
 */
const ADDED_LATENCY_BOUND_MS = TIMEOUT + 50;
/** Acceptance: correct limiting again within 1 s after Redis answers. */
const RECOVERY_BOUND_MS = 1_000;
/** An app whose Redis is down must still start about this fast. */
const APP_START_BOUND_MS = 1_500;
/** How long each outage lasts (the fault's duration, not an assertion). */
const OUTAGE_MS = 1_500;
/**
 * A call Redis runs more than `timeout` after it was sent, when its caller has stopped waiting,
 * must do nothing (the script's deadline); keys used only until this long before Redis runs again
 * are never to be charged.
 */
const STALE_AFTER_MS = TIMEOUT + 100;
/** Load kept running once limiting is correct again, to see that it stays so. */
const AFTER_MS = 500;

afterAll(() => runQueue.close());

/** What holds in every scenario: nothing hung or broken, statuses as failMode says, latency, no rejection. */
function expectCommon(scenario: Scenario, outcomes: readonly Outcome[], statuses: readonly number[]) {
  expect(outcomes.filter((o) => o.status === 0)).toHaveLength(0); // hung
  expect(outcomes.filter((o) => o.status === -1)).toHaveLength(0); // connection errors
  expect(outcomes.filter((o) => !statuses.includes(o.status)).map((o) => o.status)).toEqual([]);
  expect(outcomes.filter((o) => o.status === 503 && o.retryAfter !== '1').map((o) => o.retryAfter)).toEqual([]);
  // no error Redis answered (NOSCRIPT and a missing function above all: a restarted or flushed
  // Redis gets the call as its script, whole if need be)
  expect(outcomes.filter((o) => o.reason === 'error').map((o) => o.failure)).toEqual([]);
  // A call whose reply came back before the timeout ran in Redis well within its deadline
  // (2 x timeout after it was sent): dropping it as late means the deadline was wrong.
  expect(droppedInTime(outcomes).map((o) => `${o.limiterMs} ms`)).toEqual([]);
  const added = TimedGuard.samples.map(limiterAddedMs);
  expect(Math.max(...added)).toBeLessThanOrEqual(ADDED_LATENCY_BOUND_MS);
  expect(scenario.rejections).toEqual([]);
}

function expectLedger({ admitted, late, counted }: Ledger) {
  expect(counted).toBeGreaterThanOrEqual(admitted);
  expect(counted - admitted).toBeLessThanOrEqual(late);
}

/**
 * The faults, on the module's own client (ioredis, from a redis:// URL) and on a node-redis and an
 * iovalkey client set up as the README shows: on those, Redis killed, frozen with failMode
 * 'closed', and flushed (the other failModes and the start while down are the module's, whichever
 * client).
 */
describe.each<['url' | OtherClient, string]>([
  ['url', 'the module makes the client from a redis:// URL'],
  ...OTHER_CLIENTS.map((kind): [OtherClient, string] => [kind, `a ${kind} client`]),
])('faults under load (timeout 100 ms, %s: %s)', (kind) => {
  let scenario: Scenario;
  /** A test of the module's own client alone. */
  const ownClient = (name: string, test: () => Promise<void>) => {
    if (kind === 'url') it(name, test);
  };
  beforeEach(() => {
    scenario = new Scenario(kind);
  });
  afterEach(async () => {
    await scenario.close();
  });

  it('Redis killed (SIGKILL), restarted on its port 1.5 s later: failMode closed, Express', async () => {
    const server = await scenario.startServer();
    const client = await scenario.startApp('express', {
      redis: await scenario.redisOf(server.url),
      failMode: 'closed',
    });
    const before = keyGroup('before');
    const after = keyGroup('after');
    const load = (scenario.load = new Load(client, before));
    await load.warm();

    // From the kill on, the load uses other keys: a 'before' key charged in the new server can
    // only be a command written to the old one, sent again after the reconnect.
    load.keys = after;
    stopRedisServer(server.pid);
    const killedAt = performance.now();
    await pause(OUTAGE_MS);
    // The outage ends when the new server is started, not when this test first hears it answer:
    // the app's client may reconnect and be answered in between.
    const downUntil = performance.now();
    const restarted = await scenario.startServer(server.port);
    const answeredAt = performance.now();
    const recovery = await timeToCorrectLimiting(client, restarted, answeredAt, 'killed');
    await pause(AFTER_MS);
    await load.stop();
    await scenario.quiesce();

    const outcomes = load.outcomes;
    const outage = outcomes.filter((o) => o.started > killedAt && o.ended < downUntil);
    const firstAdmitted = outcomes.find((o) => o.started > answeredAt && o.status === 200);
    const replayed = await storedTotal(restarted, before);
    const afterLedger = await ledger(restarted, outcomes, after);
    await scenario.stopApp();

    report('Redis killed, restarted on its port after 1.5 s (closed, express)', scenario, outcomes, [
      `outage (requests started after the kill, answered before the restart began): ${tally(outage)}`,
      `correct limiting ${showRecovery(recovery)} after the new server answered; ` +
        `first load 200 after ${firstAdmitted ? (firstAdmitted.ended - answeredAt).toFixed(0) : '-'} ms`,
      `replayed: keys used only before the kill, charged in the new server: ${replayed}`,
      showLedger('keys used from the kill on', afterLedger),
    ]);
    expectCommon(scenario, outcomes, [200, 503]);
    expect(outage.length).toBeGreaterThan(0);
    expect(outage.filter((o) => o.status !== 503)).toHaveLength(0);
    expect(recovery.ms - recovery.stolenMs).toBeLessThan(RECOVERY_BOUND_MS);
    expect(replayed).toBe(0);
    expectLedger(afterLedger);
  });

  describe.each<[FailMode, AdapterName]>([
    ['closed', 'express'],
    ...(kind === 'url'
      ? [['open', 'fastify'] satisfies [FailMode, AdapterName], ['local', 'express'] satisfies [FailMode, AdapterName]]
      : []),
  ])('Redis frozen (SIGSTOP) for 1.5 s', (failMode, adapter) => {
    it(`failMode ${failMode}, ${adapter}`, async () => {
      const server = await scenario.startServer();
      const client = await scenario.startApp(adapter, { redis: await scenario.redisOf(server.url), failMode });
      const before = keyGroup('before');
      const frozen = keyGroup('frozen');
      const after = keyGroup('after');
      const load = (scenario.load = new Load(client, before));
      await load.warm();

      // Keys used only while frozen, until STALE_AFTER_MS before SIGCONT: whatever of theirs
      // sits in Redis's socket is past its deadline when Redis runs it, so must charge nothing
      // (but for a call a loaded app sent only within the timeout of SIGCONT: see leftInTime).
      scenario.freeze(server);
      const frozenAt = performance.now();
      load.keys = frozen;
      await pause(OUTAGE_MS / 3);
      const duringKey = `probe-frozen-${failMode}-during`;
      const during = await probeStatuses(client, duringKey);
      await pause(frozenAt + OUTAGE_MS - STALE_AFTER_MS - performance.now());
      load.keys = after;
      await pause(frozenAt + OUTAGE_MS - performance.now());
      const thawedAt = performance.now();
      scenario.thaw(server);
      const recovery = await timeToCorrectLimiting(client, server, thawedAt, `frozen-${failMode}`);
      await pause(AFTER_MS);
      await load.stop();
      await scenario.quiesce();

      const outcomes = load.outcomes;
      const outage = outcomes.filter((o) => o.started > frozenAt && o.ended < thawedAt);
      const frozenRequests = outcomes.filter((o) => frozen.includes(o.key));
      const frozenCharged = await storedTotal(server, frozen);
      // A call runs in time, and may charge, only when it left the app within the timeout of
      // SIGCONT: the rest are past their deadline when Redis runs them. The client sends frozen keys
      // until STALE_AFTER_MS before SIGCONT, but a loaded app may send a call later than that.
      const leftInTime = frozenRequests.filter((o) => o.leftAt > thawedAt - TIMEOUT);
      const duringCharged = await storedCount(server, 'probe', duringKey);
      const beforeLedger = await ledger(server, outcomes, before);
      const afterLedger = await ledger(server, outcomes, after);
      await scenario.stopApp();

      report(`Redis frozen 1.5 s (${failMode}, ${adapter})`, scenario, outcomes, [
        `outage (requests started after SIGSTOP, answered before SIGCONT): ${tally(outage)}; ` +
          `${outage.filter((o) => !o.decided).length} without rate-limit headers`,
        `probe key during the freeze: ${during.join(',')}; charged in Redis after SIGCONT: ${duringCharged}`,
        `stale: keys used only while frozen (${frozenRequests.length} requests: ${tally(frozenRequests)}; ` +
          `${leftInTime.length} of their calls left the app within the timeout of SIGCONT), charged after SIGCONT: ${frozenCharged}`,
        `correct limiting ${showRecovery(recovery)} after SIGCONT`,
        ...(failMode === 'local'
          ? [
              `Redis counts ${beforeLedger.counted} + ${afterLedger.counted} on the keys before/after ` +
                `(no exact check: 'local' 200s carry headers too)`,
            ]
          : [
              showLedger('keys used before SIGSTOP', beforeLedger),
              showLedger('keys used from the freeze end on', afterLedger),
            ]),
      ]);
      expectCommon(scenario, outcomes, failMode === 'closed' ? [200, 503] : [200]);
      expect(outage.length).toBeGreaterThan(0);
      expect(frozenRequests.length).toBeGreaterThan(0);
      if (failMode === 'closed') {
        expect(outage.filter((o) => o.status !== 503)).toHaveLength(0);
        expect(during).toEqual(Array(PROBE_LIMIT + PROBE_EXTRA).fill(503));
      } else if (failMode === 'open') {
        expect(outage.filter((o) => o.decided)).toHaveLength(0);
        expect(during).toEqual(Array(PROBE_LIMIT + PROBE_EXTRA).fill(200));
      } else {
        expect(during).toEqual(CORRECT_PROBE); // limited in memory while Redis is frozen
      }
      expect(recovery.ms - recovery.stolenMs).toBeLessThan(RECOVERY_BOUND_MS);
      expect(duringCharged).toBe(0);
      expect(frozenCharged).toBeLessThanOrEqual(leftInTime.length);
      if (failMode !== 'local') {
        expectLedger(beforeLedger);
        expectLedger(afterLedger);
      }
    });
  });

  it('SCRIPT FLUSH and FUNCTION FLUSH every 20 ms for 1 s under load: failMode closed, Fastify', async () => {
    const server = await scenario.startServer();
    const client = await scenario.startApp('fastify', {
      redis: await scenario.redisOf(server.url),
      failMode: 'closed',
    });
    const loadKeys = keyGroup('flush');
    const load = (scenario.load = new Load(client, loadKeys));
    await load.warm();

    const flushFrom = performance.now();
    let flushes = 0;
    // ten flushes at least: on a loaded machine a round of flush and pause can take 100 ms
    while (performance.now() - flushFrom < 1_000 || flushes < 10) {
      await redisCommand(server.port, ['SCRIPT', 'FLUSH'], 1_000);
      await redisCommand(server.port, ['FUNCTION', 'FLUSH'], 1_000);
      flushes++;
      await pause(20);
    }
    const flushedAt = performance.now();
    const recovery = await timeToCorrectLimiting(client, server, flushedAt, 'flush');
    await load.stop();
    await scenario.quiesce();

    const outcomes = load.outcomes;
    const whileFlushing = outcomes.filter((o) => o.started > flushFrom && o.started < flushedAt);
    const flushLedger = await ledger(server, outcomes, loadKeys);
    const errors = String(await redisCommand(server.port, ['INFO', 'errorstats'], 1_000));
    const noscript = Number(/errorstat_NOSCRIPT:count=(\d+)/.exec(errors)?.[1] ?? 0);
    // ERR is what an FCALL of a flushed function gets ('ERR Function not found'): no other ERR reaches a request
    const missing = Number(/errorstat_ERR:count=(\d+)/.exec(errors)?.[1] ?? 0);
    const commands = String(await redisCommand(server.port, ['INFO', 'commandstats'], 1_000));
    const evals = Number(/cmdstat_eval:calls=(\d+)/.exec(commands)?.[1] ?? 0);
    await scenario.stopApp();

    report('SCRIPT FLUSH and FUNCTION FLUSH every 20 ms for 1 s (closed, fastify)', scenario, outcomes, [
      `${flushes} flushes of each; requests started meanwhile: ${tally(whileFlushing)}`,
      `Redis answered 'Function not found' ${missing} times, NOSCRIPT ${noscript} times, and ran EVAL ${evals} times; no request saw it`,
      `correct limiting ${showRecovery(recovery)} after the last flush`,
      showLedger('load keys', flushLedger),
    ]);
    // A flush must never fail a call. On a loaded machine a call may still time out like any
    // other (and three in a row open the breaker): the only failMode answers allowed.
    expectCommon(scenario, outcomes, [200, 503]);
    const notTimeouts = outcomes.filter(
      (o) => o.reason !== undefined && o.reason !== 'timeout' && o.reason !== 'breaker_open',
    );
    expect(notTimeouts.map((o) => o.failure)).toEqual([]);
    expect(missing + noscript).toBeGreaterThan(0); // the flushes did hit the limiter's calls
    expect(recovery.ms - recovery.stolenMs).toBeLessThan(RECOVERY_BOUND_MS);
    expectLedger(flushLedger);
  });

  ownClient(
    'app started while Redis is down, Redis started on that port 0.5 s later: failMode closed, Fastify',
    async () => {
      const port = await freePort();
      const startedAt = performance.now();
      const client = await scenario.startApp('fastify', { redis: `redis://127.0.0.1:${port}`, failMode: 'closed' });
      const appStartMs = performance.now() - startedAt;
      const loadKeys = keyGroup('late');
      const load = (scenario.load = new Load(client, loadKeys));
      await pause(OUTAGE_MS / 3);
      const downUntil = performance.now();
      const server = await scenario.startServer(port);
      const answeredAt = performance.now();
      const recovery = await timeToCorrectLimiting(client, server, answeredAt, 'late');
      await pause(AFTER_MS);
      await load.stop();
      await scenario.quiesce();

      const outcomes = load.outcomes;
      const down = outcomes.filter((o) => o.ended < downUntil);
      const lateLedger = await ledger(server, outcomes, loadKeys);
      await scenario.stopApp();

      report('App started while Redis is down, Redis started 0.5 s later (closed, fastify)', scenario, outcomes, [
        `app start ${appStartMs.toFixed(0)} ms with nothing listening on the Redis port`,
        `while down: ${tally(down)}, client latency ${latency(down.map((o) => o.ended - o.started))}`,
        `correct limiting ${showRecovery(recovery)} after Redis answered`,
        showLedger('load keys', lateLedger),
      ]);
      expectCommon(scenario, outcomes, [200, 503]);
      expect(appStartMs).toBeLessThan(APP_START_BOUND_MS);
      expect(down.length).toBeGreaterThan(0);
      expect(down.filter((o) => o.status !== 503)).toHaveLength(0);
      expect(recovery.ms - recovery.stolenMs).toBeLessThan(RECOVERY_BOUND_MS);
      expectLedger(lateLedger);
    },
  );
});
