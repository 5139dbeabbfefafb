/**
 * The package as users get it: built (`npm run build`), packed (`npm pack`) and installed into a
 * copy of an app folder under test/, so the repository stays clean. The app's own dependencies
 * come from its package-lock.json (npm's cache first), the package from the tarball.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const run = promisify(execFile);

/** How long each step took, in seconds. */
export interface PackedTimes {
  build: number;
  pack: number;
  install: number;
}

/** Runs npm in `cwd`; rejects with its output when it fails. */
async function npm(cwd: string, args: string[]): Promise<string> {
  // npm and the child's scripts need none of Jest's --experimental-vm-modules
  const { NODE_OPTIONS: _jestOptions, ...env } = process.env;
  try {
    const { stdout } = await run('npm', args, { cwd, env, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`npm ${args.join(' ')} failed in ${cwd}:\n${stdout ?? ''}\n${stderr ?? ''}`);
  }
}

/** Seconds since `started` (a `performance.now()`). */
const since = (started: number): number => (performance.now() - started) / 1000;

/**
 * Builds and packs the package into `dir`, copies the app folder `app` (a path from the
 * repository's root; its files, not its node_modules) to `dir/app` and installs it there with the
 * tarball. Gives the copy's path and how long each step took.
 */
export async function installPackedApp(dir: string, app: string): Promise<{ appDir: string; times: PackedTimes }> {
  let started = performance.now();
  await npm(ROOT, ['run', 'build']);
  const build = since(started);

  started = performance.now();
  const [{ filename }] = JSON.parse(await npm(ROOT, ['pack', '--json', '--pack-destination', dir])) as { filename: string }[];
  const pack = since(started);

  const appDir = join(dir, 'app');
  await mkdir(appDir);
  for (const entry of await readdir(join(ROOT, app), { withFileTypes: true })) {
    if (entry.isFile()) await copyFile(join(ROOT, app, entry.name), join(appDir, entry.name));
  }
  started = performance.now();
  // the lock pins the app's dependencies; --no-save keeps the tarball out of the copy's package.json
  await npm(appDir, ['install', '--no-save', '--no-audit', '--no-fund', '--prefer-offline', join(dir, filename)]);
  return { appDir, times: { build, pack, install: since(started) } };
}
