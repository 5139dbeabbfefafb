import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';

/**
 * A TCP proxy in front of a Redis, in the test's process, that the test can cut: `cut()` drops
 * every connection through it and refuses new ones (each is closed as soon as it is accepted)
 * until `restore()`. An app's client connects to `port` (see `connectThrough`).
 */
export class RedisCut {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private refusing = false;

  private constructor(private readonly targetPort: number) {
    this.server = createServer((client) => this.accept(client));
  }

  /** A proxy on a free loopback port to the Redis on `targetPort`. */
  static async start(targetPort: number): Promise<RedisCut> {
    const proxy = new RedisCut(targetPort);
    proxy.server.listen(0, '127.0.0.1');
    await once(proxy.server, 'listening');
    return proxy;
  }

  /** The loopback port to connect to instead of Redis's. */
  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /** Drops every connection through the proxy, and refuses new ones until `restore()`. */
  cut(): void {
    this.refusing = true;
    for (const socket of this.sockets) socket.destroy();
  }

  /** Lets connections through again. */
  restore(): void {
    this.refusing = false;
  }

  async close(): Promise<void> {
    this.cut();
    const closed = once(this.server, 'close');
    this.server.close();
    await closed;
  }

  private accept(client: Socket): void {
    if (this.refusing) return void client.destroy();
    const upstream = connect(this.targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.setNoDelay(true);
      // either end closing closes the other: the pair is one connection
      socket.once('close', () => {
        this.sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
      socket.on('error', () => socket.destroy());
    }
    client.pipe(upstream).pipe(client);
  }
}

/**
 * An ioredis client of the Redis behind `proxy`, ready, that fails a command at once while it has
 * no connection (no offline queue, no retries of a command), and reconnects every 10 ms: a
 * command sent while the proxy is cut is an error, not a wait.
 */
export async function connectThrough(proxy: RedisCut): Promise<Redis> {
  const client = new Redis({
    host: '127.0.0.1',
    port: proxy.port,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => 10,
  });
  // a dropped connection is what the test does on purpose: commands report their own failures
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/**
 * Cuts the proxy, and resolves once `client` has seen its connection drop: from then on, until
 * the proxy is restored and the client is ready again, every command it is given fails.
 */
export async function cutUnder(proxy: RedisCut, client: Redis): Promise<void> {
  // not events.once: an 'error' the drop may bring first would reject it
  const closed = client.status === 'ready' ? new Promise((resolve) => client.once('close', resolve)) : undefined;
  proxy.cut();
  await closed;
}
