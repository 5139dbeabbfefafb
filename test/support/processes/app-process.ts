/**
 * An installed app (test/nest11, test/nest12) run as a Node process of its own, under any Node
 * build: started with its environment, ready once it prints one JSON line (what it listens on and
 * what it loaded), asked over real HTTP, stopped by SIGTERM.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { get as httpGet } from 'node:http';
import { createInterface } from 'node:readline';
import { childEnv } from './node-builds.js';

/** A running app: its ready line, the process, and what it wrote to stderr so far. */
export interface AppProcess<Ready> {
  ready: Ready;
  child: ChildProcessWithoutNullStreams;
  stderr: () => string;
}

/** How to start an app: the Node binary, the app's folder and entry file, its environment. */
export interface AppStart {
  node: string;
  cwd: string;
  entry: string;
  env: Record<string, string>;
}

/** Starts the app and waits for its ready line. */
export async function startAppProcess<Ready>({ node, cwd, entry, env }: AppStart): Promise<AppProcess<Ready>> {
  // the app needs no --experimental-vm-modules (it would only print a warning on stderr)
  const child = spawn(node, [entry], { cwd, env: childEnv(env), stdio: 'pipe' });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const ready = await new Promise<Ready>((resolve, reject) => {
    const exited = (code: number | null) =>
      reject(new Error(`${node} ${entry} (in ${cwd}) exited (${code}) before it listened. stderr:\n${stderr}`));
    child.once('exit', exited);
    createInterface({ input: child.stdout }).once('line', (line) => {
      child.off('exit', exited);
      resolve(JSON.parse(line) as Ready);
    });
  });
  return { ready, child, stderr: () => stderr };
}

/** SIGTERM (the app closes itself, and the Redis client it opened), SIGKILL if it is still up 10 s later. */
export async function stopAppProcess({ child }: { child: ChildProcessWithoutNullStreams }): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** A response, its body read and parsed. */
export interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
}

/**
 * GET `path` from the app on `port`, with `headers`, on a connection of its own: over a pooled one
 * that the app had closed at its keep-alive timeout, while this loaded process had not yet run its
 * own (shorter) timer for it, a request failed ('other side closed').
 */
export function getJson(port: number, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    httpGet({ host: '127.0.0.1', port, path, headers, agent: false }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('error', reject);
      response.on('end', () => {
        const replyHeaders = new Headers();
        for (const [name, value] of Object.entries(response.headers))
          for (const one of [value ?? []].flat()) replyHeaders.append(name, one);
        try {
          const body: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          resolve({ status: response.statusCode ?? 0, headers: replyHeaders, body });
        } catch (error) {
          reject(error);
        }
      });
    }).on('error', reject);
  });
}

/** Within `tolerance` below `expected` (time passes between requests; buckets refill, windows run out). */
export function expectAbout(actual: number, expected: number, tolerance = 1): void {
  expect(actual).toBeLessThanOrEqual(expected);
  expect(actual).toBeGreaterThanOrEqual(expected - tolerance);
}
