import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';

/** A TCP proxy on a free loopback port in front of a server, whose connections a test can cut. */
export interface CutProxy {
  /** The loopback port to connect to instead of the server's. */
  readonly port: number;
  /** Drops every connection it carries and refuses new ones until `mend()`: the server is out of reach. */
  cut(): Promise<void>;
  /** Carries new connections to the server again, on the same port. */
  mend(): Promise<void>;
  close(): Promise<void>;
}

const HOST = '127.0.0.1';

/**
 * Forwards each connection to the server at `targetPort`, byte for byte both ways, until the test
 * cuts them: a client then sees its connection closed under it and each reconnection refused,
 * while the server itself runs on. (A proxy that accepted a reconnection and closed it at once
 * would hold ioredis's queued commands through its handshake, unanswered, instead of failing
 * them after `maxRetriesPerRequest`.)
 *
 * @example const proxy = await startCutProxy(6379); await proxy.cut(); ...; await proxy.mend();
 */
export async function startCutProxy(targetPort: number): Promise<CutProxy> {
  const sockets = new Set<Socket>();
  const carry = (socket: Socket, peer: Socket) => {
    sockets.add(socket);
    // a cut connection's reset is what the test asks for, not a failure of the proxy
    socket.on('error', () => undefined);
    socket.on('close', () => {
      sockets.delete(socket);
      peer.destroy();
    });
    socket.pipe(peer);
  };
  const listen = async (port: number): Promise<Server> => {
    const server = createServer((client) => {
      const upstream = connect(targetPort, HOST);
      carry(client, upstream);
      carry(upstream, client);
    });
    server.listen(port, HOST);
    await once(server, 'listening');
    return server;
  };
  let server: Server | undefined = await listen(0);
  const { port } = server.address() as { port: number };
  const stop = async () => {
    if (server === undefined) return;
    const closed = once(server, 'close');
    server.close();
    server = undefined;
    for (const socket of sockets) socket.destroy();
    await closed;
  };
  return {
    port,
    cut: stop,
    mend: async () => {
      server ??= await listen(port);
    },
    close: stop,
  };
}
