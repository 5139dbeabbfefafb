/**
 * The package as an older commit of this repository built it, loaded beside the current build in
 * the same process, so that the regression comparisons (bench/regression.ts) alternate old and
 * new under the same load. The commit's `lib/` and build configs come out of git (`git archive`,
 * so any clone whose history holds the commit works, and no worktree is registered), into a
 * temporary folder that gets a link to this checkout's node_modules: both builds share one copy
 * of NestJS, ioredis and TypeScript. The folder is removed when the process exits.
 */
import { execFileSync } from 'node:child_process';
import { rmSync, symlinkSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The commit compared against when BENCH_BASELINE does not name one: the last before issue 25. */
export const DEFAULT_BASELINE = '272b40a';

/** What the package's root exports: the baseline's must still offer what the comparisons use. */
export type PackageApi = typeof import('nestjs-ratelimit');

/** An older commit's build, loaded. */
export interface BaselineBuild {
  /** The ref as given (`272b40a`, `main~3`, a tag). */
  ref: string;
  /** The commit it names, abbreviated. */
  commit: string;
  /** The build's root module. */
  api: PackageApi;
}

/** The checkout this bench was built from: dist-bench/bench/ is two levels below it. */
const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** What the build needs from the commit: its sources and the configs that compile them. */
const BUILD_INPUTS = ['lib', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];

/**
 * Builds `ref` (BENCH_BASELINE, else `DEFAULT_BASELINE`) with its own tsconfig.build.json and
 * imports it. Throws, naming the ref, when git does not know it.
 */
export async function buildBaseline(log: (line: string) => void): Promise<BaselineBuild> {
  const ref = process.env.BENCH_BASELINE || DEFAULT_BASELINE;
  const commit = git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], `BENCH_BASELINE ${ref} names no commit`);
  const short = git(['rev-parse', '--short', commit], `no commit ${commit}`);
  const dir = await mkdtemp(join(tmpdir(), `nestjs-ratelimit-${short}-`));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  log(`building the baseline ${ref} (${short}) in ${dir}`);
  execFileSync('sh', ['-c', 'git archive --format=tar "$@" | tar -x -C "$0"', dir, commit, ...BUILD_INPUTS], {
    cwd: REPO,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  symlinkSync(join(REPO, 'node_modules'), join(dir, 'node_modules'), 'dir');
  const tsc = join(REPO, 'node_modules', 'typescript', 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.build.json')], { cwd: dir, stdio: 'inherit' });
  const api = (await import(pathToFileURL(join(dir, 'dist', 'index.js')).href)) as PackageApi;
  return { ref, commit: short, api };
}

/** git's answer, trimmed; `failure` when git fails. */
function git(args: readonly string[], failure: string): string {
  try {
    return execFileSync('git', args, { cwd: REPO, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    throw new Error(`${failure} in ${REPO} (a shallow clone may lack it: git fetch --unshallow)`);
  }
}
