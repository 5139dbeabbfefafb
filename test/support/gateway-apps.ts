import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { INestApplication, LoggerService, Type } from '@nestjs/common';
import { IoAdapter } from '@nestjs/platform-socket.io';
import { WsAdapter } from '@nestjs/platform-ws';
import { Test } from '@nestjs/testing';
import { io } from 'socket.io-client';
import WebSocket from 'ws';

/** The WebSocket adapters every gateway suite runs on: `@nestjs/platform-socket.io` and `@nestjs/platform-ws`. */
export const GATEWAY_ADAPTERS = ['socket.io', 'ws'] as const;
export type GatewayAdapterName = (typeof GATEWAY_ADAPTERS)[number];

/** A message a client received: socket.io's event and its first argument; ws's frame, parsed (`{ event, data }`). */
export interface Received {
  event: string;
  data: any;
}

/** A connected client of a gateway that reads what it receives in order. */
export interface GatewayClient {
  /** Sends a message for the gateway's `@SubscribeMessage(event)` handler. */
  send(event: string, data?: unknown): void;
  /**
   * Sends what no handler takes: ws, `text` as a frame as it is (not JSON, not a message);
   * socket.io, an event named `text` (its protocol closes a connection that sends a malformed
   * packet, before any gateway sees it).
   */
  sendFrame(text: string): void;
  /** The next message received, in the order they came. */
  next(): Promise<Received>;
  /** Sends a message and reads the next one received. */
  ask(event: string, data?: unknown): Promise<Received>;
  /** Whether the connection is still open (the server did not drop it). */
  readonly open: boolean;
  /** Closes the connection and resolves once the client sees it closed. */
  close(): Promise<void>;
}

/** What a client sends with its handshake: socket.io `extraHeaders`; ws upgrade request headers. */
export interface ConnectOptions {
  headers?: Record<string, string>;
}

/** A started app with gateways, the errors and warnings Nest logged, and a way to connect clients. */
export interface GatewayApp {
  app: INestApplication;
  /** `error` and `warn` lines the app logged, as their first argument. */
  logged: { error: unknown[]; warn: unknown[] };
  connect(options?: ConnectOptions): Promise<GatewayClient>;
  /** Closes every client it connected, then the app. */
  close(): Promise<void>;
}

/** Builds `module` with the named WebSocket adapter and listens on a free loopback port; a failed start is closed. */
export async function startGatewayApp(module: Type, adapter: GatewayAdapterName): Promise<GatewayApp> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const logged = { error: [] as unknown[], warn: [] as unknown[] };
  const app = moduleRef.createNestApplication({ logger: recorder(logged) });
  app.useWebSocketAdapter(adapter === 'ws' ? new WsAdapter(app) : new IoAdapter(app));
  try {
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    // a start that fails (a bad policy) still made the gateways' servers
    await app.close();
    throw error;
  }
  const { port } = (app.getHttpServer() as Server).address() as AddressInfo;
  const clients: GatewayClient[] = [];
  return {
    app,
    logged,
    async connect(options = {}) {
      const client = adapter === 'ws' ? await connectWs(port, options) : await connectIo(port, options);
      clients.push(client);
      return client;
    },
    async close() {
      await Promise.all(clients.map((client) => client.close()));
      await app.close();
    },
  };
}

/** A logger that keeps errors and warnings and drops the rest. */
function recorder(logged: GatewayApp['logged']): LoggerService {
  return {
    log: () => undefined,
    error: (message: unknown) => void logged.error.push(message),
    warn: (message: unknown) => void logged.warn.push(message),
  };
}

/** Received messages in order, handed to readers as they come. */
class Inbox {
  private readonly messages: Received[] = [];
  private readonly readers: Array<(message: Received) => void> = [];

  put(message: Received): void {
    const reader = this.readers.shift();
    if (reader === undefined) this.messages.push(message);
    else reader(message);
  }

  take(): Promise<Received> {
    const message = this.messages.shift();
    if (message !== undefined) return Promise.resolve(message);
    return new Promise((resolve) => this.readers.push(resolve));
  }
}

async function connectIo(port: number, { headers }: ConnectOptions): Promise<GatewayClient> {
  const socket = io(`http://127.0.0.1:${port}`, {
    transports: ['websocket'],
    extraHeaders: headers,
    forceNew: true,
    reconnection: false,
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('connect_error', reject);
  });
  const inbox = new Inbox();
  socket.onAny((event: string, data: unknown) => inbox.put({ event, data }));
  return {
    send: (event, data) => void socket.emit(event, data),
    sendFrame: (text) => void socket.emit(text),
    next: () => inbox.take(),
    ask(event, data) {
      socket.emit(event, data);
      return inbox.take();
    },
    get open() {
      return socket.connected;
    },
    async close() {
      if (!socket.connected) return;
      const closed = new Promise<void>((resolve) => socket.once('disconnect', () => resolve()));
      socket.disconnect();
      await closed;
    },
  };
}

async function connectWs(port: number, { headers }: ConnectOptions): Promise<GatewayClient> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}`, { headers });
  await new Promise<void>((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  const inbox = new Inbox();
  // a text frame, as a Buffer (the socket's binaryType is the default, 'nodebuffer')
  socket.on('message', (frame) => inbox.put(JSON.parse((frame as Buffer).toString()) as Received));
  return {
    send: (event, data) => socket.send(JSON.stringify({ event, data })),
    sendFrame: (text) => socket.send(text),
    next: () => inbox.take(),
    ask(event, data) {
      socket.send(JSON.stringify({ event, data }));
      return inbox.take();
    },
    get open() {
      return socket.readyState === WebSocket.OPEN;
    },
    async close() {
      if (socket.readyState === WebSocket.CLOSED) return;
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.close();
      await closed;
    },
  };
}
