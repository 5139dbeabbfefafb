/**
 * `nestjs-ratelimit/testing` as users get it: the package is built (`npm run build`), packed
 * (`npm pack`) and unpacked into a project's node_modules (its other packages: links to this
 * repository's), and a user's file imports `nestjs-ratelimit` and `nestjs-ratelimit/testing`
 * through the `exports` map, in a Node process of its own (ESM, and CommonJS through the require
 * conditions) and under `tsc` (NodeNext resolution, so the `types` conditions are what is read). The root entry's import graph, as built, never
 * reaches the testing entry.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { packedPackage } from '../support/processes/packed-app.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

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
console.log(JSON.stringify({ allowed, waited, sameModule: testing.imports.some((imported) => imported.module === RateLimitModule) }));
`;

/** The user's test in ESM, importing as users do. */
const CONSUMER_MJS = `
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { RateLimitModule, RateLimiterService } from 'nestjs-ratelimit';
import { ManualClock, RateLimitTestingModule } from 'nestjs-ratelimit/testing';
${CONSUMER_BODY}`;

/** The same in CommonJS (a NestJS 11 app's tests): the require conditions. */
const CONSUMER_CJS = `
require('reflect-metadata');
const { NestFactory } = require('@nestjs/core');
const { RateLimitModule, RateLimiterService } = require('nestjs-ratelimit');
const { ManualClock, RateLimitTestingModule } = require('nestjs-ratelimit/testing');
if (!require.resolve('nestjs-ratelimit/testing').endsWith('/dist/cjs/testing/index.js')) throw new Error(require.resolve('nestjs-ratelimit/testing'));
(async () => {${CONSUMER_BODY}})();
`;

/** The same use, typed: compiled against the package's declarations. */
const CONSUMER_MTS = `
import { RateLimiterService } from 'nestjs-ratelimit';
import { ManualClock, RateLimitTestingModule, type RateLimitTestingOptions } from 'nestjs-ratelimit/testing';

const options: RateLimitTestingOptions = { prefix: 'test:', headers: false };
export const testing = RateLimitTestingModule.forRoot(options);
const clock: ManualClock = new ManualClock(0);
export const at: number = clock.advance('1s') + clock.set(5) + clock.now();
export const stop: () => void = clock.onChange(() => undefined);
export const reset: (limiter: RateLimiterService) => Promise<void> = (limiter) => limiter.resetAll();
// @ts-expect-error the testing module makes its own store
RateLimitTestingModule.forRoot({ store: undefined, redis: 'redis://localhost:6379' });
`;

/** A CommonJS user's file, typed: NodeNext reads the require condition's declarations. */
const CONSUMER_CTS = `
import { ManualClock } from 'nestjs-ratelimit/testing';
export const at: number = new ManualClock(0).advance('250ms');
`;

let project: string;
let pkg: string;

beforeAll(async () => {
  const started = performance.now();
  project = await mkdtemp(join(tmpdir(), 'rl-testing-entry-'));
  const { tarball } = await packedPackage();
  await run('tar', ['-xzf', tarball, '-C', project]);
  await mkdir(join(project, 'node_modules'));
  pkg = join(project, 'node_modules', 'nestjs-ratelimit');
  await rename(join(project, 'package'), pkg);
  for (const entry of await readdir(join(ROOT, 'node_modules'))) {
    if (entry !== 'nestjs-ratelimit' && !entry.startsWith('.')) await symlink(join(ROOT, 'node_modules', entry), join(project, 'node_modules', entry));
  }
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
  it("maps './testing' to built files that are in the package", async () => {
    const { exports } = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
    expect(Object.keys(exports)).toEqual(expect.arrayContaining(['.', './testing']));
    const testing = targets(exports['./testing']);
    expect(testing).toEqual(expect.arrayContaining(['./dist/testing/index.d.ts', './dist/testing/index.js']));
    expect([...targets(exports['.']), ...testing].filter((target) => !existsSync(join(pkg, target)))).toEqual([]);
  });

  it('loads the testing entry only when it is imported: the root never reaches it', async () => {
    const { exports } = JSON.parse(await readFile(join(pkg, 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
    const root = await graphFrom(join(pkg, importTarget(exports['.'])));
    const testing = await graphFrom(join(pkg, importTarget(exports['./testing'])));
    // the walk follows imports: the root reaches the module, as the testing entry does (one copy of it)
    const module = join(pkg, 'dist', 'rate-limit.module.js');
    expect(root.has(module) && testing.has(module)).toBe(true);
    expect([...root].filter((file) => file.includes(`${join('dist', 'testing')}/`))).toEqual([]);
  });

  it.each(['consumer.mjs', 'consumer.cjs'])('works for a user file that imports it (%s): burst of 2, advance 1 s, resetAll, a leaky_bucket turn', async (file) => {
    const { NODE_OPTIONS: _jestOptions, ...env } = process.env;
    const child = spawn(process.execPath, [join(project, file)], { cwd: project, env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const code = await new Promise<number | null>((exited) => child.once('exit', exited));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(stdout)).toEqual({ allowed: [true, true, false, true, false, true], waited: 'its turn', sameModule: true });
  }, 60_000);

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
  }, 60_000);
});
