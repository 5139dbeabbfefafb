/**
 * The package as users get it: built (`npm run build`), packed (`npm pack`) and installed into a
 * copy of an app folder under test/, so the repository stays clean. The app's own dependencies
 * come from its package-lock.json (npm's cache first), the package from the tarball. Or unpacked
 * into a temp project whose other packages are this repository's, for specs that use it without an install.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { basename, join } from 'node:path';
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
    throw new Error(`npm ${args.join(' ')} failed in ${cwd}:\n${stdout ?? ''}\n${stderr ?? ''}`, { cause: error });
  }
}

/** Seconds since `started` (a `performance.now()`). */
const since = (started: number): number => (performance.now() - started) / 1000;

/** The packed package: its tarball's path, and how long building and packing it took. */
export interface PackedPackage {
  tarball: string;
  build: number;
  pack: number;
}

/**
 * The package built (`npm run build`, into dist/) and packed once per Jest run, in the global
 * setup's TEST_PACK_DIR, for every spec that needs it: two builds at once would write dist/ under
 * each other's `npm pack`. The first caller (whose `mkdir` of the lock succeeds) builds; the
 * others wait for its answer.
 */
export async function packedPackage(): Promise<PackedPackage> {
  const dir = process.env.TEST_PACK_DIR;
  if (!dir)
    throw new Error(
      'TEST_PACK_DIR is not set: the packed package is for the e2e project (its global setup makes the dir)',
    );
  const answer = join(dir, 'packed.json');
  try {
    await mkdir(join(dir, 'lock'));
  } catch {
    return awaitAnswer(answer);
  }
  let packed: PackedPackage | { error: string };
  try {
    let started = performance.now();
    await npm(ROOT, ['run', 'build']);
    const build = since(started);
    started = performance.now();
    const [{ filename }] = JSON.parse(await npm(ROOT, ['pack', '--json', '--pack-destination', dir])) as {
      filename: string;
    }[];
    packed = { tarball: join(dir, filename), build, pack: since(started) };
  } catch (error) {
    packed = { error: (error as Error).message };
  }
  // written whole, then renamed: a waiting spec never reads half of it
  await writeFile(`${answer}.part`, JSON.stringify(packed));
  await rename(`${answer}.part`, answer);
  if ('error' in packed) throw new Error(packed.error);
  return packed;
}

/** What the spec that builds the package wrote to `answer`, once it is there. */
async function awaitAnswer(answer: string): Promise<PackedPackage> {
  for (;;) {
    const text = await readFile(answer, 'utf8').catch(() => undefined);
    if (text !== undefined) {
      const packed = JSON.parse(text) as PackedPackage | { error: string };
      if ('error' in packed) throw new Error(`building the package failed in another spec: ${packed.error}`);
      return packed;
    }
    await sleep(250);
  }
}

/**
 * A project in a new temp dir (named from `prefix`) with the packed package unpacked as its
 * `node_modules/nestjs-ratelimit`, its other `node_modules/*` entries links to this repository's:
 * what a user's project sees, without an install. Gives the project's path and the package's.
 */
export async function unpackedProject(prefix: string): Promise<{ project: string; pkg: string }> {
  const { tarball } = await packedPackage();
  const project = await mkdtemp(join(tmpdir(), prefix));
  const pkg = join(project, 'node_modules', 'nestjs-ratelimit');
  try {
    await run('tar', ['-xzf', tarball, '-C', project]);
    await mkdir(join(project, 'node_modules'));
    await rename(join(project, 'package'), pkg);
    for (const entry of await readdir(join(ROOT, 'node_modules'))) {
      if (entry !== 'nestjs-ratelimit' && !entry.startsWith('.'))
        await symlink(join(ROOT, 'node_modules', entry), join(project, 'node_modules', entry));
    }
  } catch (error) {
    await rm(project, { recursive: true, force: true });
    throw error;
  }
  return { project, pkg };
}

/**
 * Copies the app folder `app` (a path from the repository's root; its files, not its
 * node_modules) and the files `shared` (paths from the root; files it shares with another app)
 * to `dir/app` and installs it there with the packed package, and `packages` (npm specs) if any.
 * Gives the copy's path and how long each step took.
 */
export async function installPackedApp(
  dir: string,
  app: string,
  shared: string[] = [],
  packages: string[] = [],
): Promise<{ appDir: string; times: PackedTimes }> {
  const { tarball, build, pack } = await packedPackage();

  const appDir = join(dir, 'app');
  await mkdir(appDir);
  for (const entry of await readdir(join(ROOT, app), { withFileTypes: true })) {
    if (entry.isFile()) await copyFile(join(ROOT, app, entry.name), join(appDir, entry.name));
  }
  for (const file of shared) await copyFile(join(ROOT, file), join(appDir, basename(file)));
  // the lock pins the app's dependencies; --no-save keeps the tarball out of the copy's package.json
  const started = performance.now();
  await npm(appDir, ['install', '--no-save', '--no-audit', '--no-fund', '--prefer-offline', tarball, ...packages]);
  return { appDir, times: { build, pack, install: since(started) } };
}
