import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { Redis } from 'ioredis';

/**
 * A TCP proxy on a free loopback port between clients and a server (an app and its Redis) that the
 * test holds, cuts and opens again, so that a test waits for events rather than for time.
 */
export interface GateProxy {
  /** The loopback port to connect to instead of the server's. */
  port: number;
  /** Keeps back what the server sends (its answers) until `open()`; what clients send still reaches it. */
  hold(): void;
  /** Drops every connection, and each new one as soon as it is made, until `open()`. */
  cut(): void;
  /** Lets through what was held back, in order, and everything from now on. */
  open(): void;
  close(): Promise<void>;
}

/** A client's connection and the proxy's own to the server, with the server's answers held back. */
interface Link {
  client: Socket;
  upstream: Socket;
  held: Buffer[];
}

/**
 * Starts a proxy to `targetPort` on the loopback address, open. It runs in the test's own
 * process: it keeps no time, only what the test tells it (see `latency-proxy.ts` for a hop that
 * keeps time while the test's process is busy).
 *
 * @example const gate = await startGateProxy(redisPort); const client = new Redis(gate.port, '127.0.0.1'); gate.cut();
 */
export async function startGateProxy(targetPort: number): Promise<GateProxy> {
  let state: 'open' | 'held' | 'cut' = 'open';
  const links = new Set<Link>();
  const drop = (link: Link): void => {
    links.delete(link);
    link.client.destroy();
    link.upstream.destroy();
  };

  const server = createServer((client) => {
    if (state === 'cut') {
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, '127.0.0.1');
    const link: Link = { client, upstream, held: [] };
    links.add(link);
    for (const socket of [client, upstream]) {
      socket.setNoDelay(true);
      socket.on('error', () => drop(link));
      socket.on('close', () => drop(link));
    }
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => {
      if (state === 'held') link.held.push(chunk);
      else client.write(chunk);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');

  return {
    port: (server.address() as AddressInfo).port,
    hold: () => void (state = 'held'),
    cut: () => {
      state = 'cut';
      for (const link of [...links]) drop(link);
    },
    open: () => {
      state = 'open';
      for (const link of links) for (const chunk of link.held.splice(0)) link.client.write(chunk);
    },
    close: async () => {
      for (const link of [...links]) drop(link);
      server.close();
      await once(server, 'close');
    },
  };
}

/**
 * An ioredis client through `gate`, set up as the docs ask of a client passed in: a call Redis
 * cannot be reached for fails at once, and none is sent again after a reconnection. Connected.
 */
export async function clientThrough(gate: GateProxy): Promise<Redis> {
  const client = new Redis(gate.port, '127.0.0.1', {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(attempt * 50, 250),
    lazyConnect: true,
  });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}
