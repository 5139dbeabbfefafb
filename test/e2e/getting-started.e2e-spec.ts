/**
 * Getting started's app as a new user makes it: the `file=` blocks of
 * docs/01-getting-started.md copied into `src/` of a project that has the package as packed,
 * compiled with a NestJS app's options, and run with `node` on a Redis of its own (`REDIS_URL`,
 * as the page says). What the page promises is then asked over HTTP: the headers, a burst of 50
 * then 429 with `Retry-After`, a bucket per API key on the export route, a health route never
 * limited, and the buckets in Redis with a TTL.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { APP_COMPILER_OPTIONS, tsBlocks } from '../support/docs-check.js';
import { unpackedProject } from '../support/processes/packed-app.js';
import { withRedis } from '../support/redis/client.js';
import { freePort, startRedisServer, stopRedisProcesses } from '../support/redis/process.js';
import { waitUntil } from '../support/wait.js';

const PAGE = fileURLToPath(new URL('../../docs/01-getting-started.md', import.meta.url));

/** Writes the page's `file=` blocks into `dir` and compiles them to `dir/dist`; gives the compiler's errors. */
async function buildPageApp(dir: string): Promise<string[]> {
  const files: string[] = [];
  for (const block of tsBlocks(await readFile(PAGE, 'utf8'))) {
    if (block.file === undefined || block.fragment) continue;
    const path = join(dir, block.file);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, block.code);
    files.push(path);
  }
  const options = { ...APP_COMPILER_OPTIONS, noEmit: false, rootDir: join(dir, 'src'), outDir: join(dir, 'dist') };
  const program = ts.createProgram(files, options);
  const { diagnostics } = program.emit();
  return [...ts.getPreEmitDiagnostics(program), ...diagnostics].map((d) =>
    ts.flattenDiagnosticMessageText(d.messageText, ' '),
  );
}

/** `url`'s answer, its body read (so that its connection goes back to the pool). */
async function get(url: string, headers: Record<string, string> = {}) {
  const response = await fetch(url, { headers });
  return { status: response.status, headers: response.headers, body: await response.text() };
}

let project: string;
let redis: { pid: number; port: number; url: string };
let app: ChildProcess;
let base: string;
let output = '';

beforeAll(async () => {
  ({ project } = await unpackedProject('rl-getting-started-'));
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'my-api', private: true, type: 'module' }));
  expect(await buildPageApp(project)).toEqual([]);
  redis = await startRedisServer();
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  const { NODE_OPTIONS: _jestOptions, ...inherited } = process.env;
  app = spawn(process.execPath, [join(project, 'dist', 'main.js')], {
    env: { ...inherited, REDIS_URL: redis.url, PORT: String(port) },
    stdio: 'pipe',
  });
  app.stdout?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  app.stderr?.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  await waitUntil('the app to listen', 30_000, async () => {
    if (app.exitCode !== null) return `the app exited (${app.exitCode}):\n${output}`;
    await get(`${base}/health`);
    return '';
  });
}, 180_000);

afterAll(async () => {
  if (app && app.exitCode === null && app.signalCode === null) {
    const exited = new Promise((resolve) => app.once('exit', resolve));
    app.kill('SIGTERM'); // enableShutdownHooks: the app closes its server and its Redis client
    const stuck = setTimeout(() => app.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(stuck);
  }
  if (redis) await stopRedisProcesses([redis.pid]);
  if (project) await rm(project, { recursive: true, force: true });
}, 20_000);

describe("Getting started's app, copied from the page into a project", () => {
  it('sends the headers, admits a burst of 50, then answers 429 with Retry-After', async () => {
    const first = await get(`${base}/orders`);
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"global";q=200;w=2, "OrdersController.list";q=50;w=5');
    expect(first.headers.get('ratelimit')).toMatch(/"OrdersController\.list";r=49;t=\d+/);

    const started = performance.now();
    const statuses: number[] = [];
    let refused: Awaited<ReturnType<typeof get>> | undefined;
    while (refused === undefined && statuses.length < 100) {
      const response = await get(`${base}/orders`);
      statuses.push(response.status);
      if (response.status === 429) refused = response;
    }
    const seconds = (performance.now() - started) / 1000;
    // 49 left of the burst, and what 10 a second refilled while the requests were sent
    const admitted = statuses.filter((status) => status === 200).length;
    expect(admitted).toBeGreaterThanOrEqual(49);
    expect(admitted).toBeLessThanOrEqual(49 + Math.ceil(10 * seconds));
    expect(refused?.headers.get('retry-after')).toBe('1');
    expect(JSON.parse(refused?.body ?? '{}')).toMatchObject({
      statusCode: 429,
      policy: 'OrdersController.list',
      retryAfter: 1,
    });
  });

  it('keeps a bucket per API key on the export route, in Redis, with a TTL', async () => {
    const remaining = async (apiKey: string) => {
      const response = await get(`${base}/orders/export`, { 'x-api-key': apiKey });
      expect(response.headers.get('ratelimit-policy')).toContain('"exports";q=100;w=3600');
      return /"exports";r=(\d+)/.exec(response.headers.get('ratelimit') ?? '')?.[1];
    };
    expect([await remaining('key-1'), await remaining('key-1'), await remaining('key-2')]).toEqual(['99', '98', '99']);
    const ttls = await withRedis(redis.port, async (client) =>
      Promise.all((await client.keys('rl:exports:*')).map((key) => client.pttl(key))),
    );
    expect(ttls).toHaveLength(2);
    for (const ttl of ttls) expect(ttl).toBeGreaterThan(0);
  });

  it('never limits the health route', async () => {
    const responses = await Promise.all(Array.from({ length: 60 }, () => get(`${base}/health`)));
    expect(responses.map((response) => response.status)).toEqual(Array(60).fill(200));
    expect(responses.some((response) => response.headers.has('ratelimit'))).toBe(false);
  });
});
