import { createServer, connect, type Server, type Socket } from 'node:net';

/** A TCP proxy on a free loopback port that delays every chunk, each way, by a random time. */
export interface LatencyProxy {
  /** The loopback port to connect to instead of the server's. */
  port: number;
  close(): Promise<void>;
}

/**
 * Puts `minMs` to `maxMs` (uniformly drawn per chunk) between a client and the server at
 * `targetPort`, in both directions, the way a network hop between an app and its Redis does.
 * Bytes keep their order: a chunk never leaves before the one read before it.
 *
 * @example const proxy = await startLatencyProxy(server.port, 1, 3); new Redis(proxy.port, '127.0.0.1');
 */
export async function startLatencyProxy(targetPort: number, minMs: number, maxMs: number): Promise<LatencyProxy> {
  const sockets = new Set<Socket>();
  const delayed = (from: Socket, to: Socket) => {
    // one queue and one timer per direction, so chunks leave in the order they came
    const queue: { at: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    let ended = false;
    const pump = () => {
      timer = undefined;
      while (queue.length > 0 && queue[0].at <= performance.now()) {
        const { chunk } = queue.shift()!;
        if (to.writable) to.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(pump, Math.max(0, queue[0].at - performance.now()));
      else if (ended) to.destroy();
    };
    from.on('data', (chunk) => {
      const last = queue.length > 0 ? queue[queue.length - 1].at : 0;
      queue.push({ at: Math.max(last, performance.now() + minMs + Math.random() * (maxMs - minMs)), chunk });
      timer ??= setTimeout(pump, Math.max(0, queue[0].at - performance.now()));
    });
    from.on('close', () => {
      ended = true;
      if (timer === undefined) to.destroy();
    });
  };
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.setNoDelay(true);
      socket.on('error', () => socket.destroy());
      socket.on('close', () => sockets.delete(socket));
    }
    delayed(client, upstream);
    delayed(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
