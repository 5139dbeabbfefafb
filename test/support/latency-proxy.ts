import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/** A TCP proxy on a free loopback port that delays every chunk, each way, by a random time. */
export interface LatencyProxy {
  /** The loopback port to connect to instead of the server's. */
  port: number;
  close(): Promise<void>;
}

const SCRIPT = fileURLToPath(new URL('./processes/latency-proxy.mjs', import.meta.url));

/**
 * Puts `minMs` to `maxMs` (uniformly drawn per chunk) between a client and the server at
 * `targetPort`, in both directions, the way a network hop between an app and its Redis does, in a
 * process of its own (`processes/latency-proxy.mjs`): the hop keeps its time while the test's
 * process, which runs the app, is busy. Bytes keep their order.
 *
 * @example const proxy = await startLatencyProxy(server.port, 1, 3); new Redis(proxy.port, '127.0.0.1');
 */
export async function startLatencyProxy(targetPort: number, minMs: number, maxMs: number): Promise<LatencyProxy> {
  const child: ChildProcess = fork(SCRIPT, [String(targetPort), String(minMs), String(maxMs)], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  try {
    const [line] = (await once(child.stdout!, 'data')) as [Buffer];
    const port = Number(String(line).trim());
    if (!Number.isInteger(port)) throw new Error(`the latency proxy printed "${String(line).trim()}", not its port`);
    return {
      port,
      close: async () => {
        if (child.exitCode !== null) return;
        const exited = once(child, 'exit');
        child.kill();
        await exited;
      },
    };
  } catch (error) {
    child.kill();
    throw error;
  }
}
