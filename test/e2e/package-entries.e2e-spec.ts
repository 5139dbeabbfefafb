/**
 * The package's entries as users get them, `nestjs-ratelimit/testing`, `nestjs-ratelimit/store`
 * and `nestjs-ratelimit/throttler` beside the root: the package is built (`npm run build`), packed
 * (`npm pack`) and unpacked into a project's node_modules (its other packages: links to this
 * repository's), and a user's file imports all four through the `exports` map, in a Node process of its own (ESM, and CommonJS
 * through the require conditions) and under `tsc` (NodeNext resolution, so the `types` conditions
 * are what is read). The root entry's import graph, as built, never reaches the other three.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import ts from 'typescript';
import { unpackedProject } from '../support/processes/packed-app.js';

/** What a user's test does, after its imports: prints what it saw as one JSON line. */
const CONSUMER_BODY = `
const testing = RateLimitTestingModule.forRoot();
const app = await NestFactory.createApplicationContext(testing, { logger: false });
const clock = app.get(ManualClock);
const limiter = app.get(RateLimiterService);
const policy = { name: 'burst-2', rps: 1, burst: 2 };
const take = async (cost = 1) => (await limiter.consume('ip:1', policy, cost))[0].allowed;
const allowed = [await take(), await take(), await take()];
clock.advance('1s');
allowed.push(await take(), await take());
await limiter.resetAll();
allowed.push(await take(2));
// a leaky_bucket request's turn, 1 s of the manual clock away, comes when the clock is advanced
const queue = { name: 'queue', algorithm: 'leaky_bucket', rps: 1, burst: 2 };
await limiter.consume('ip:2', queue);
const turn = limiter.wait(await limiter.consume('ip:2', queue)).then(() => 'its turn');
clock.advance('1s');
const waited = await Promise.race([turn, new Promise((resolve) => setImmediate(resolve, 'still waiting'))]);
await app.close();
// a store of one's own decides with the store kit as the built-in stores do, one bucket kept here
const rule = { algorithm: 'token_bucket', rps: 1, burst: 2 };
const request = { key: 'rl:kit', policy: 'kit', rule, cost: 1 };
let state;
const decided = [];
for (const now of [0, 0, 0, 1000]) {
  const verdict = kit.decideAll([{ state, rule, cost: 1 }], now, true);
  if (verdict.allowed) state = verdict.next[0];
  const decision = kit.toDecision(request, verdict.outcomes[0]);
  decided.push([decision.allowed, kit.takeCharge(decision) !== undefined]);
}
// one copy of what the root exports too: the token, and the error the module tells by its class
const sameKit = kit.RateLimitStore === RateLimitStore && kit.RateLimitStoreError === RateLimitStoreError;
const sameModule = testing.imports.some((imported) => imported.module === RateLimitModule);
// the @nestjs/throttler drop-in: its module, and its storage counting NT's way on a memory store
const throttling = ThrottlerModule.forRoot([{ ttl: seconds(60), limit: 2 }]);
const storage = new RateLimitThrottlerStorage();
const throttled = [];
for (let i = 0; i < 3; i++) throttled.push((await storage.increment('k', seconds(60), 2, 0, 'default')).isBlocked);
await storage.onApplicationShutdown();
const throttler = { module: throttling.module === ThrottlerModule, guard: typeof ThrottlerGuard, throttled };
console.log(JSON.stringify({ allowed, waited, sameModule, decided, sameKit, throttler }));
`;

/** The user's test in ESM, importing as users do. */
const CONSUMER_MJS = `
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { RateLimitModule, RateLimiterService, RateLimitStore, RateLimitStoreError } from 'nestjs-ratelimit';
import * as kit from 'nestjs-ratelimit/store';
import { ManualClock, RateLimitTestingModule } from 'nestjs-ratelimit/testing';
import { RateLimitThrottlerStorage, ThrottlerGuard, ThrottlerModule, seconds } from 'nestjs-ratelimit/throttler';
${CONSUMER_BODY}`;

/** The same in CommonJS (a NestJS 11 app's tests): the require conditions. */
const CONSUMER_CJS = `
require('reflect-metadata');
const { NestFactory } = require('@nestjs/core');
const { RateLimitModule, RateLimiterService, RateLimitStore, RateLimitStoreError } = require('nestjs-ratelimit');
const kit = require('nestjs-ratelimit/store');
const { ManualClock, RateLimitTestingModule } = require('nestjs-ratelimit/testing');
const { RateLimitThrottlerStorage, ThrottlerGuard, ThrottlerModule, seconds } = require('nestjs-ratelimit/throttler');
if (!require.resolve('nestjs-ratelimit/testing').endsWith('/dist/cjs/testing/index.js')) throw new Error(require.resolve('nestjs-ratelimit/testing'));
if (!require.resolve('nestjs-ratelimit/store').endsWith('/dist/cjs/store/index.js')) throw new Error(require.resolve('nestjs-ratelimit/store'));
if (!require.resolve('nestjs-ratelimit/throttler').endsWith('/dist/cjs/throttler/index.js')) throw new Error(require.resolve('nestjs-ratelimit/throttler'));
(async () => {${CONSUMER_BODY}})();
`;

/** The same use, typed: compiled against the package's declarations. */
const CONSUMER_MTS = `
import { RateLimiterService } from 'nestjs-ratelimit';
import {
  decideAll,
  distinctRequests,
  type Entry,
  type Outcome,
  type RateLimitDecision,
  type RateLimitRequest,
  type RateLimitStore,
  RateLimitStoreError,
  type Rule,
  toDecision,
  tokenBucket,
  type Verdict,
} from 'nestjs-ratelimit/store';
import { ManualClock, RateLimitTestingModule, type RateLimitTestingOptions } from 'nestjs-ratelimit/testing';
import {
  RateLimitThrottlerStorage,
  type ThrottlerModuleOptions,
  type ThrottlerStorage,
  type ThrottlerStorageRecord,
  ThrottlerModule,
} from 'nestjs-ratelimit/throttler';

const options: RateLimitTestingOptions = { prefix: 'test:', headers: false };
export const testing = RateLimitTestingModule.forRoot(options);
const clock: ManualClock = new ManualClock(0);
export const at: number = clock.advance('1s') + clock.set(5) + clock.now();
export const stop: () => void = clock.onChange(() => undefined);
export const reset: (limiter: RateLimiterService) => Promise<void> = (limiter) => limiter.resetAll();
// @ts-expect-error the testing module makes its own store
RateLimitTestingModule.forRoot({ store: undefined, redis: 'redis://localhost:6379' });

/** A store of one's own, typed from the store kit: it decides on nothing kept, every bucket new. */
export class FreshStore implements RateLimitStore {
  async consume(given: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    const { requests } = distinctRequests(given, 'FreshStore.consume');
    const entries: Entry[] = requests.map(({ rule, cost }) => ({ state: undefined, rule, cost }));
    const verdict: Verdict = decideAll(entries, Date.now(), true);
    return requests.map((request, i) => toDecision(request, verdict.outcomes[i]));
  }
  peek(given: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.consume(given);
  }
  async reset(_keys: readonly string[]): Promise<void> {
    throw new RateLimitStoreError('nothing to reset', { reason: 'error' });
  }
}
export const rule: Rule = { algorithm: 'token_bucket', rps: 2, burst: 4 };
export const tokens: number = tokenBucket.current(undefined, 0, rule).tokens;
export const outcome: Outcome = decideAll([{ state: undefined, rule, cost: 1 }], 0, false).outcomes[0];
const throttlers: ThrottlerModuleOptions = { throttlers: [{ name: 'short', ttl: 1_000, limit: 3 }] };
const storage: ThrottlerStorage = new RateLimitThrottlerStorage({ prefix: 'nt:', failMode: 'open', timeout: 100 });
export const throttling = ThrottlerModule.forRoot(throttlers, { prefix: 'nt:' });
export const record: Promise<ThrottlerStorageRecord> = storage.increment('k', 1_000, 3, 0, 'short');
`;

/** A CommonJS user's file, typed: NodeNext reads the require condition's declarations. */
const CONSUMER_CTS = `
import type { StoreClock } from 'nestjs-ratelimit/store';
import { ManualClock } from 'nestjs-ratelimit/testing';
import { ThrottlerGuard, type ThrottlerOptions } from 'nestjs-ratelimit/throttler';
export const at: number = new ManualClock(0).advance('250ms');
export const short: ThrottlerOptions = { name: 'short', ttl: 1_000, limit: 3 };
export const guard: typeof ThrottlerGuard = ThrottlerGuard;
export const clock: StoreClock = new ManualClock(0);
`;

let project: string;
let pkg: string;

beforeAll(async () => {
  const started = performance.now();
  ({ project, pkg } = await unpackedProject('rl-package-entries-'));
  await writeFile(join(project, 'consumer.mjs'), CONSUMER_MJS);
  await writeFile(join(project, 'consumer.cjs'), CONSUMER_CJS);
  await writeFile(join(project, 'consumer.mts'), CONSUMER_MTS);
  await writeFile(join(project, 'consumer.cts'), CONSUMER_CTS);
  console.log(`built, packed and unpacked in ${Math.round(performance.now() - started)} ms`);
}, 180_000);

afterAll(async () => {
  if (project) await rm(project, { recursive: true, force: true });
});

/** The file an `exports` entry gives `import` (a path, or the `default` of its conditions). */
function importTarget(entry: unknown): string {
  const target = (entry as { import: string | { default: string } }).import;
  return typeof target === 'string' ? target : target.default;
}

/** Every file an `exports` entry names, through all of its conditions. */
function targets(entry: unknown): string[] {
  if (typeof entry === 'string') return [entry];
  return Object.values(entry as Record<string, unknown>).flatMap(targets);
}

/** The files `file` imports by relative path, statically or dynamically, then theirs: the whole graph. */
async function graphFrom(file: string, seen = new Set<string>()): Promise<Set<string>> {
  if (seen.has(file)) return seen;
  seen.add(file);
  const text = await readFile(file, 'utf8');
  for (const [, specifier] of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)) {
    await graphFrom(resolve(dirname(file), specifier), seen);
  }
  return seen;
}

describe('the packed package', () => {
  it.each(['testing', 'store', 'throttler'])("maps './%s' to built files that are in the package", async (entry) => {
    const { exports } = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
    };
    expect(Object.keys(exports)).toEqual(expect.arrayContaining(['.', `./${entry}`]));
    const files = targets(exports[`./${entry}`]);
    expect(files).toEqual(expect.arrayContaining([`./dist/${entry}/index.d.ts`, `./dist/${entry}/index.js`]));
    expect(files).toEqual(expect.arrayContaining([`./dist/cjs/${entry}/index.d.ts`, `./dist/cjs/${entry}/index.js`]));
    expect([...targets(exports['.']), ...files].filter((target) => !existsSync(join(pkg, target)))).toEqual([]);
  });

  it.each([
    // the walk follows imports: the root reaches the module, as the testing entry does (one copy of it)
    ['testing', join('dist', 'rate-limit.module.js')],
    // and the store interface's file (its injection token), as the store kit does
    ['store', join('dist', 'stores', 'rate-limit-store.interface.js')],
    // and the store owner, as the throttler drop-in's storage does (one copy of the stores)
    ['throttler', join('dist', 'stores', 'store-owner.js')],
  ])('loads the %s entry only when it is imported: the root never reaches it', async (entry, shared) => {
    const { exports } = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
    };
    const root = await graphFrom(join(pkg, importTarget(exports['.'])));
    const reached = await graphFrom(join(pkg, importTarget(exports[`./${entry}`])));
    expect(root.has(join(pkg, shared)) && reached.has(join(pkg, shared))).toBe(true);
    expect([...root].filter((file) => file.includes(`${join('dist', entry)}/`))).toEqual([]);
  });

  it.each(['consumer.mjs', 'consumer.cjs'])(
    'works for a user file that imports them (%s): burst of 2, advance 1 s, resetAll, a leaky_bucket turn, a kit decision',
    async (file) => {
      const { NODE_OPTIONS: _jestOptions, ...env } = process.env;
      const child = spawn(process.execPath, [join(project, file)], { cwd: project, env });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
      const code = await new Promise<number | null>((exited) => child.once('exit', exited));
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      expect(JSON.parse(stdout)).toEqual({
        allowed: [true, true, false, true, false, true],
        waited: 'its turn',
        sameModule: true,
        // admitted ones carry their charge record, for a refund
        decided: [
          [true, true],
          [true, true],
          [false, false],
          [true, true],
        ],
        sameKit: true,
        throttler: { module: true, guard: 'function', throttled: [false, false, true] },
      });
    },
    60_000,
  );

  it("type-checks a user's ESM and CommonJS files against its declarations (NodeNext resolution)", () => {
    const program = ts.createProgram([join(project, 'consumer.mts'), join(project, 'consumer.cts')], {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
    });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(problems).toEqual([]);
    // the declarations were read from the package, through its exports map
    const read = program.getSourceFiles().map((file) => file.fileName);
    expect(read).toContain(join(pkg, 'dist', 'testing', 'index.d.ts'));
    expect(read).toContain(join(pkg, 'dist', 'cjs', 'testing', 'index.d.ts'));
    expect(read).toContain(join(pkg, 'dist', 'store', 'index.d.ts'));
    expect(read).toContain(join(pkg, 'dist', 'cjs', 'store', 'index.d.ts'));
    expect(read).toContain(join(pkg, 'dist', 'throttler', 'index.d.ts'));
    expect(read).toContain(join(pkg, 'dist', 'cjs', 'throttler', 'index.d.ts'));
  }, 60_000);
});
