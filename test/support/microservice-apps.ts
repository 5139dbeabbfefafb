import { once } from 'node:events';
import { type AddressInfo, connect, type Server } from 'node:net';
import { Controller, type ExecutionContext, Get, type LoggerService, type Type, UseGuards } from '@nestjs/common';
import {
  ClientProxyFactory,
  type ClientTCP,
  EventPattern,
  JsonSocket,
  MessagePattern,
  type MicroserviceOptions,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { firstValueFrom, lastValueFrom } from 'rxjs';
import {
  RateLimit,
  type RateLimitCallOptions,
  type RateLimitDecision,
  RateLimitGuard,
  type RateLimitRequest,
  RateLimitStore,
  RateLimitStoreError,
} from '../../lib/index.js';

/**
 * The harness of `test/e2e/microservice.e2e-spec.ts`: controllers with `@MessagePattern` and
 * `@EventPattern` handlers under `@RateLimit` policies, a TCP microservice on a free loopback port
 * with a Nest client of its own (`startMicroservice`), a hybrid HTTP app (`startHybrid`), a raw
 * client that sends any JSON text as a payload (`RawTcpClient`), stores that tell the test when
 * they have answered (`WatchedStore`) or fail (`FailingStore`), and a logger that keeps what Nest
 * logs as errors (`ErrorLog`).
 */

/** Every policy here: 2 messages at once, then one per 100 s (the tests never wait for a refill). */
const BURST = { rps: 0.01, burst: 2 };

/** The payloads the tenant key function was given, in order. */
export const keyFunctionSaw: unknown[] = [];

/** The README's key function, as an app writes it: the tenant named in the payload. */
function tenantKey(context: ExecutionContext): string | undefined {
  const data = context.switchToRpc().getData<{ tenant?: string } | null | undefined>();
  keyFunctionSaw.push(data);
  return data?.tenant;
}

@Controller()
export class TenantsController {
  /** The payloads of the audit events whose handler ran. */
  readonly audited: unknown[] = [];

  /** No key function: every caller shares the policy's bucket. */
  @RateLimit({ name: 'shared', ...BURST })
  @MessagePattern('shared')
  shared() {
    return { ok: true };
  }

  /** A bucket per tenant named in the payload; payloads that name none share one. */
  @RateLimit({ name: 'tenant', ...BURST, key: tenantKey })
  @MessagePattern('tenant')
  tenant(@Payload() data: unknown) {
    return { ok: true, payload: Array.isArray(data) ? 'array' : data === null ? 'null' : typeof data };
  }

  @RateLimit({ name: 'audit', ...BURST })
  @EventPattern('audit')
  audit(@Payload() data: unknown) {
    this.audited.push(data);
  }

  /** Not limited: what the audit handler has seen, asked after the events. */
  @MessagePattern('audited')
  auditedSoFar() {
    return this.audited;
  }
}

/** A controller served over HTTP and TCP at once, by a hybrid app. */
@Controller('hybrid')
export class HybridController {
  @RateLimit({ name: 'http-ping', ...BURST })
  @Get('ping')
  httpPing() {
    return { ok: true };
  }

  @RateLimit({ name: 'rpc-ping', ...BURST })
  @MessagePattern('ping')
  rpcPing() {
    return 'pong';
  }

  /** The guard named here too: with a global guard as well, a message is still charged once. */
  @UseGuards(RateLimitGuard)
  @RateLimit({ name: 'rpc-guarded', ...BURST })
  @MessagePattern('guarded')
  rpcGuarded() {
    return 'pong';
  }
}

const LOOPBACK = '127.0.0.1';

/** A started TCP microservice and a connected Nest client of it. */
export interface TestMicroservice {
  port: number;
  client: ClientTCP;
  /** The client's `send`, as a promise of its one answer. */
  send(pattern: string, data: unknown): Promise<unknown>;
  /** The client's `emit`, resolved once the event is written to the socket. */
  emit(pattern: string, data: unknown): Promise<void>;
  /** Another Nest client of the same microservice, closed with it. */
  connectClient(): Promise<ClientTCP>;
  get<T>(type: Type<T>): T;
  close(): Promise<void>;
}

/** Builds `module` as a TCP microservice on a free loopback port and connects a client to it. */
export async function startMicroservice(
  module: Type,
  logger: LoggerService | false = false,
): Promise<TestMicroservice> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const app = moduleRef.createNestMicroservice<MicroserviceOptions>({
    transport: Transport.TCP,
    options: { host: LOOPBACK, port: 0 },
    logger,
  });
  await app.listen();
  const port = (app.unwrap<Server>().address() as AddressInfo).port;
  return connected(
    port,
    () => app.close(),
    (type) => app.get(type),
  );
}

/** A hybrid app: Express on a free port, and a TCP microservice connected to it. */
export interface TestHybrid extends TestMicroservice {
  url: string;
}

/** Builds `module` as an Express app with a TCP microservice connected (`connectMicroservice`), both on free ports. */
export async function startHybrid(
  module: Type,
  { inheritAppConfig }: { inheritAppConfig: boolean },
): Promise<TestHybrid> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const app = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
  const microservice = app.connectMicroservice<MicroserviceOptions>(
    { transport: Transport.TCP, options: { host: LOOPBACK, port: 0 } },
    { inheritAppConfig },
  );
  await app.startAllMicroservices();
  await app.listen(0, LOOPBACK);
  const port = (microservice.unwrap<Server>().address() as AddressInfo).port;
  const url = (await app.getUrl()).replace('[::1]', LOOPBACK);
  return {
    ...(await connected(
      port,
      () => app.close(),
      (type) => app.get(type),
    )),
    url,
  };
}

async function connected(
  port: number,
  closeApp: () => Promise<void>,
  get: <T>(type: Type<T>) => T,
): Promise<TestMicroservice> {
  const clients: ClientTCP[] = [];
  const connectClient = async (): Promise<ClientTCP> => {
    const client = ClientProxyFactory.create({
      transport: Transport.TCP,
      options: { host: LOOPBACK, port },
    }) as ClientTCP;
    clients.push(client);
    await client.connect();
    return client;
  };
  const client = await connectClient();
  return {
    port,
    client,
    send: (pattern, data) => firstValueFrom(client.send(pattern, data)),
    emit: async (pattern, data) => void (await lastValueFrom(client.emit(pattern, data), { defaultValue: undefined })),
    connectClient,
    get,
    close: async () => {
      // ClientTCP.close() ends the socket and returns nothing to wait for
      for (const each of clients) each.close();
      await closeApp();
    },
  };
}

/** A message's reply over TCP: the handler's answer, or the error Nest's client would fail with. */
export interface RawReply {
  id: string;
  response?: unknown;
  err?: unknown;
}

/**
 * A client that writes Nest's TCP framing (`<length>#<json>`) itself, so a payload is sent as the
 * JSON text given, whatever it is: `null` (Nest's client refuses it), or nesting too deep for
 * `JSON.stringify`. Replies are read with Nest's `JsonSocket`; one message at a time.
 */
export class RawTcpClient {
  private sent = 0;

  private constructor(private readonly socket: JsonSocket) {}

  static async connect(port: number): Promise<RawTcpClient> {
    const socket = connect(port, LOOPBACK);
    await once(socket, 'connect');
    return new RawTcpClient(new JsonSocket(socket));
  }

  /** Sends a message whose payload is `dataJson`, and resolves with its reply (the packet that ends it). */
  async send(pattern: string, dataJson: string): Promise<RawReply> {
    const id = String(++this.sent);
    const net = this.socket.netSocket;
    const reply = new Promise<RawReply>((resolve) => {
      let response: unknown;
      const onMessage = (packet: RawReply & { isDisposed?: boolean }) => {
        if (packet.id !== id) return;
        if ('response' in packet) response = packet.response;
        if (packet.err === undefined && !packet.isDisposed) return;
        net.off('message', onMessage);
        resolve(packet.err === undefined ? { id, response } : { id, err: packet.err });
      };
      net.on('message', onMessage);
    });
    const frame = `{"pattern":${JSON.stringify(pattern)},"id":"${id}","data":${dataJson}}`;
    net.write(`${frame.length}#${frame}`);
    return reply;
  }

  async close(): Promise<void> {
    const closed = once(this.socket.netSocket, 'close');
    this.socket.end();
    await closed;
  }
}

/**
 * A store that tells the test when it has answered: `answered(policy, n)` resolves once n calls
 * for that policy have settled (a decision, or a failure), so a test waits for the limiter's
 * answer, not for time.
 */
export class WatchedStore implements RateLimitStore {
  private readonly counts = new Map<string, number>();
  private readonly waiting = new Set<{ policy: string; count: number; resolve: () => void }>();

  constructor(private readonly store: RateLimitStore) {}

  get inProcess(): boolean | undefined {
    return this.store.inProcess;
  }

  async consume(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    try {
      return await this.store.consume(requests, options);
    } finally {
      this.settled(requests);
    }
  }

  cached(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    const decisions = this.store.cached?.(requests);
    if (decisions !== undefined) this.settled(requests);
    return decisions;
  }

  peek(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    return this.store.peek(requests, options);
  }

  reset(keys: readonly string[]): Promise<void> {
    return this.store.reset(keys);
  }

  async refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    await this.store.refund?.(decisions);
  }

  async close(): Promise<void> {
    await this.store.close?.();
  }

  /** Resolves once `count` calls for `policy` have been answered. */
  answered(policy: string, count: number): Promise<void> {
    if ((this.counts.get(policy) ?? 0) >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiting.add({ policy, count, resolve }));
  }

  private settled(requests: readonly RateLimitRequest[]): void {
    for (const policy of new Set(requests.map((request) => request.policy))) {
      const count = (this.counts.get(policy) ?? 0) + 1;
      this.counts.set(policy, count);
      for (const waiter of this.waiting) {
        if (waiter.policy !== policy || waiter.count > count) continue;
        this.waiting.delete(waiter);
        waiter.resolve();
      }
    }
  }
}

/** A store that cannot decide: every call fails as a broken Redis would. */
export class FailingStore implements RateLimitStore {
  consume(): Promise<RateLimitDecision[]> {
    return Promise.reject(new RateLimitStoreError('the store is down'));
  }

  peek(): Promise<RateLimitDecision[]> {
    return Promise.reject(new RateLimitStoreError('the store is down'));
  }

  async reset(): Promise<void> {}
}

/** A logger that keeps what Nest logs as errors, to show what a test's messages made it log. */
export class ErrorLog implements LoggerService {
  readonly errors: string[] = [];

  error(message: unknown, ...rest: unknown[]): void {
    this.errors.push([message, ...rest].map(String).join(' '));
  }

  log(): void {}
  warn(): void {}
}
