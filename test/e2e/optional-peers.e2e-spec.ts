/**
 * `@nestjs/graphql`, `graphql`, `@nestjs/websockets` and `@nestjs/microservices` are optional
 * peers: an app that limits only HTTP works without them, and the module imports none of them
 * until it sees a context that needs it. `@opentelemetry/api`, an optional peer too, is imported
 * once at start, for metrics: without it there are none, and the app works the same. The app
 * (`test/support/processes/peers-app.ts`) runs as a Node process of its own, whose resolve hook
 * logs every import of those packages with the module that asked for it; Nest itself loads some
 * when they are installed, so the log is read for imports asked for by the module's own files.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from '@jest/globals';
import { buildApp } from '../support/processes/build-app.js';

/** Imported at start (for metrics) whatever the app limits. */
const OTEL = '@opentelemetry/api';
const HOOKS = fileURLToPath(new URL('../support/processes/peers-hooks.mjs', import.meta.url));

let buildDir: string;
let entry: string;

beforeAll(async () => {
  buildDir = await mkdtemp(join(tmpdir(), 'rl-peers-'));
  entry = await buildApp(buildDir, 'test/support/processes/peers-app.ts');
  // a build, CPU-bound: about 10 s beside busy processes, past 60 s beside them and the suite's
  // other builds (as package-entries' build, 3 minutes)
}, 180_000);

afterAll(async () => {
  await rm(buildDir, { recursive: true, force: true });
});

interface Run {
  /** The JSON lines it printed, merged. */
  printed: Record<string, unknown>;
  /** The log's lines: `{ specifier, parent }` imports and marker lines. */
  log: (string | { specifier: string; parent: string })[];
}

/** Runs the app with `env` and the hooks; rejects with its stderr unless it exits 0. */
async function run(name: string, env: Record<string, string>): Promise<Run> {
  const log = join(buildDir, `${name}.log`);
  await writeFile(log, '');
  // the child needs no --experimental-vm-modules (it would only print a warning on stderr)
  const { NODE_OPTIONS: _jestOptions, ...inherited } = process.env;
  const child = spawn(process.execPath, ['--import', HOOKS, entry], { env: { ...inherited, ...env, PEERS_LOG: log } });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`peers-app exited with ${code}. stderr:\n${stderr}`);
  const printed: Run['printed'] = {};
  for (const line of stdout.trim().split('\n')) Object.assign(printed, JSON.parse(line) as object);
  const lines = (await readFile(log, 'utf8')).trim().split('\n').filter(Boolean);
  return {
    printed,
    log: lines.map((line) =>
      line.startsWith('{') ? (JSON.parse(line) as { specifier: string; parent: string }) : line,
    ),
  };
}

/** The optional peers (packages, not their files) the module's own files (not Nest's, not the app's) asked for. */
function importedByModule(lines: Run['log']): string[] {
  const packages = lines.flatMap((line) =>
    typeof line === 'object' && line.parent.includes('/lib/') ? [line.specifier] : [],
  );
  return [
    ...new Set(
      packages.map((specifier) =>
        specifier
          .split('/')
          .slice(0, specifier.startsWith('@') ? 2 : 1)
          .join('/'),
      ),
    ),
  ];
}

describe('optional peers', () => {
  it('an HTTP app works in a project without any of them', async () => {
    const { printed, log } = await run('missing', { PEERS_MISSING: '1' });
    expect(printed.statuses).toEqual([200, 429]);
    // the hook did see Nest look for them: the check below could fail
    expect(log.length).toBeGreaterThan(0);
    expect(importedByModule(log)).toEqual([OTEL]);
  }, 60_000);

  it('none is imported until a context that needs it is seen: then only that one', async () => {
    const { printed, log } = await run('rpc', { WITH_RPC: '1' });
    expect(printed.statuses).toEqual([200, 429]);
    expect(printed.rpc).toEqual(['taken', { error: expect.objectContaining({ statusCode: 429 }) }]);
    const marker = log.indexOf('first rpc message');
    expect(marker).toBeGreaterThan(-1);
    expect(importedByModule(log.slice(0, marker))).toEqual([OTEL]);
    expect(importedByModule(log.slice(marker))).toEqual(['@nestjs/microservices']);
  }, 60_000);
});
