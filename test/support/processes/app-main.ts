import type { Server } from 'node:http';
import type { INestApplication } from '@nestjs/common';

/** What an app process does around its app's close (see `serveUntilStopped`). */
export interface Stopping {
  /** Ends what would hold the app's close (requests the process itself keeps waiting). */
  beforeClose?: () => void;
  /** Closes what the process opened beside the app (its own Redis clients, its store). */
  afterClose?: () => Promise<unknown>;
}

/**
 * The end of an app process's start (the spec runs it with `startAppProcess`, or spawns it):
 * listens on a free loopback port, prints `{"port":<n>}`, and stops on SIGTERM or SIGINT, or when
 * the spec's process goes away (its stdin ends): `beforeClose`, the server's connections closed
 * (a request still waiting would hold `close()`), the app closed, `afterClose`, exit 0.
 */
export async function serveUntilStopped(
  app: INestApplication,
  { beforeClose, afterClose }: Stopping = {},
): Promise<Server> {
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error(`unexpected address ${String(address)}`);
  process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);

  let closing = false;
  const stop = async (): Promise<void> => {
    if (closing) return;
    closing = true;
    beforeClose?.();
    server.closeAllConnections();
    await app.close();
    await afterClose?.();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
  // the spec's process went away without stopping this one: do not outlive it
  process.stdin.once('end', () => void stop());
  process.stdin.resume();
  return server;
}

/** Runs an app process's `main`: a failure is written on stderr under the app's name, and the process exits with 1. */
export function runAppMain(name: string, main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(
      `${name} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  });
}
