import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  BadRequestException,
  Controller,
  type ExecutionContext,
  Get,
  type INestApplication,
  Module,
  Query,
  StreamableFile,
  type Type,
} from '@nestjs/common';
import { Args, GraphQLModule, Query as GraphqlQuery, Resolver } from '@nestjs/graphql';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { MessageBody, SubscribeMessage, WebSocketGateway, WsException } from '@nestjs/websockets';
import { jest } from '@jest/globals';
import type { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  RedisStore,
} from '../../lib/index.js';
import { RateLimiter } from '../../lib/limiter/rate-limiter.js';
import { closeApp } from './app.js';

/**
 * The harness of `test/e2e/concurrency.e2e-spec.ts`: handlers under a `concurrency` policy
 * (`exports`, 2 in flight per client) that hold their request open until the test ends it
 * (`holds`), on HTTP (Express or Fastify), GraphQL (Apollo), a socket.io gateway and a TCP
 * microservice; and a watch on the engine's refunds, so a test waits for a slot to be given back
 * rather than for time.
 */

/** How the test ends a held request: its handler returns, throws (a 500), or refuses it (a 400). */
export type Ending = 'ok' | 'error' | 'bad-request';

/** A promise and what settles it. */
interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((settle) => (resolve = settle));
  return { promise, resolve };
}

/**
 * The requests held open by the handlers, by the id each request carries: a handler counts itself
 * in flight from when it starts until it ends, and waits for the test to end it (`end`). A
 * streamed answer is held as its stream, which the test writes and ends (`stream`).
 */
export class Holds {
  /** Handlers running now. */
  inFlight = 0;
  /** The most handlers that ran at once since the last `resetMax`. */
  max = 0;
  private readonly arrivals = new Map<string, Deferred<void>>();
  private readonly endings = new Map<string, Deferred<Ending>>();
  private readonly streams = new Map<string, PassThrough>();

  /** Run by a handler: counts it in flight until the test ends it, and says how. */
  async hold(id: string): Promise<Ending> {
    this.inFlight++;
    this.max = Math.max(this.max, this.inFlight);
    this.arrival(id).resolve();
    try {
      return await this.ending(id).promise;
    } finally {
      this.inFlight--;
    }
  }

  /** Run by a streaming handler: the body the test writes (it is not counted in flight). */
  open(id: string): PassThrough {
    const body = new PassThrough();
    this.streams.set(id, body);
    this.arrival(id).resolve();
    return body;
  }

  /** Resolves once the handler of request `id` runs: the guard admitted it. */
  entered(id: string): Promise<void> {
    return this.arrival(id).promise;
  }

  /** Ends the handler of request `id` (now or once it runs). */
  end(id: string, ending: Ending = 'ok'): void {
    this.ending(id).resolve(ending);
  }

  /** The body of the streamed request `id`, once its handler made it. */
  async stream(id: string): Promise<PassThrough> {
    await this.entered(id);
    return this.streams.get(id)!;
  }

  resetMax(): void {
    this.max = this.inFlight;
  }

  private arrival(id: string): Deferred<void> {
    let arrival = this.arrivals.get(id);
    if (arrival === undefined) this.arrivals.set(id, (arrival = deferred()));
    return arrival;
  }

  private ending(id: string): Deferred<Ending> {
    let ending = this.endings.get(id);
    if (ending === undefined) this.endings.set(id, (ending = deferred()));
    return ending;
  }
}

/** The one `Holds` of every app here: each request names itself by a fresh id. */
export const holds = new Holds();

/** A fresh request id. */
export const newId = (): string => randomUUID();

/** The policy under test, keyed by `key`: 2 in flight per client; a slot not given back is reclaimed after 5 minutes. */
export const exportsPolicy = (key: RateLimitPolicy['key']): RateLimitPolicy => ({
  name: 'exports',
  algorithm: 'concurrency',
  limit: 2,
  key,
  lease: '5m',
});

/** The client a WebSocket message or an RPC message names in its payload. */
interface ExportMessage {
  id: string;
  client: string;
}

// ---------------------------------------------------------------------------------------------
// HTTP

@Controller('exports')
export class ExportsController {
  /** Held until the test ends it: 200, 500 or 400. */
  @RateLimit(exportsPolicy('header:x-client'))
  @Get()
  async run(@Query('id') id: string) {
    return answer(id, await holds.hold(id));
  }

  /** A streamed answer: what the test writes, until it ends the stream (or the client goes). */
  @RateLimit(exportsPolicy('header:x-client'))
  @Get('stream')
  stream(@Query('id') id: string) {
    return new StreamableFile(holds.open(id), { type: 'text/plain' });
  }
}

/** What a handler ended as: its answer, or the error it throws. */
function answer(id: string, ending: Ending): { id: string } {
  if (ending === 'error') throw new Error(`export ${id} failed`);
  if (ending === 'bad-request') throw new BadRequestException(`export ${id} refused`);
  return { id };
}

// ---------------------------------------------------------------------------------------------
// GraphQL (Apollo on Express)

@Resolver()
class ExportsResolver {
  @RateLimit(exportsPolicy('header:x-client'))
  @GraphqlQuery(() => String)
  async exportReport(@Args('id', { type: () => String }) id: string): Promise<string> {
    return answer(id, await holds.hold(id)).id;
  }
}

/** A GraphQL answer's body. */
export interface GraphqlAnswer {
  data?: Record<string, unknown> | null;
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

/** A started Apollo app: POSTs a query to `/graphql`. */
export interface GraphqlTestApp {
  app: INestApplication;
  post(
    query: string,
    headers: Record<string, string>,
  ): Promise<{ status: number; headers: Headers; body: GraphqlAnswer }>;
  close(): Promise<void>;
}

/** An Apollo app of `resolvers` under `RateLimitModule.forRoot(options)`, listening on a free loopback port. */
export async function startGraphql(options: RateLimitModuleOptions, resolvers: Type[]): Promise<GraphqlTestApp> {
  @Module({
    imports: [
      RateLimitModule.forRoot(options),
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true, graphiql: false }),
    ],
    providers: resolvers,
  })
  class GraphqlModule {}

  const moduleRef = await Test.createTestingModule({ imports: [GraphqlModule] }).compile();
  const app = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return {
    app,
    async post(query, headers) {
      const response = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ query }),
      });
      return { status: response.status, headers: response.headers, body: (await response.json()) as GraphqlAnswer };
    },
    close: () => closeApp(app),
  };
}

/** The exports resolver's app (see `startGraphql`). */
export const startGraphqlExports = (options: RateLimitModuleOptions): Promise<GraphqlTestApp> =>
  startGraphql(options, [ExportsResolver]);

/** Resolves once `count` of `promises` have settled. */
export function settledCount(promises: readonly Promise<unknown>[], count: number): Promise<void> {
  return new Promise((resolve) => {
    let settled = 0;
    for (const promise of promises) {
      const one = () => {
        if (++settled === count) resolve();
      };
      void promise.then(one, one);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// socket.io gateway, TCP microservice

const messageClient = (context: ExecutionContext, type: 'ws' | 'rpc'): string =>
  (type === 'ws' ? context.switchToWs() : context.switchToRpc()).getData<ExportMessage>().client;

@WebSocketGateway()
export class ExportsGateway {
  /** Answers `exported`, or an `exception` when the test ends it with an error. */
  @RateLimit(exportsPolicy((context) => messageClient(context, 'ws')))
  @SubscribeMessage('export')
  async export(@MessageBody() { id }: ExportMessage) {
    if ((await holds.hold(id)) !== 'ok') throw new WsException(`export ${id} failed`);
    return { event: 'exported', data: { id } };
  }
}

@Controller()
export class ExportsMessages {
  /** Replies `{ id }`, or an error when the test ends it with one. */
  @RateLimit(exportsPolicy((context) => messageClient(context, 'rpc')))
  @MessagePattern('export')
  async export(@Payload() { id }: ExportMessage) {
    if ((await holds.hold(id)) !== 'ok') throw new RpcException(`export ${id} failed`);
    return { id };
  }
}

// ---------------------------------------------------------------------------------------------
// stores, refunds

/** The stores every suite here runs on. */
export const STORES = ['memory', 'redis'] as const;
export type StoreName = (typeof STORES)[number];

/** The module options of a store: Redis on the caller's client, under a prefix of the app's own. */
export function storeOptions(store: StoreName, redis: () => Redis): RateLimitModuleOptions {
  return store === 'memory'
    ? { store: new MemoryStore() }
    : { store: new RedisStore({ client: redis() }), prefix: `rl-e2e-cc-${randomUUID()}:` };
}

/**
 * Watches the slots the app's engine gives back as requests end (`RateLimiter.release`):
 * `released(n)` resolves once n releases have reached the store and returned.
 */
export function watchReleases(app: INestApplication): {
  released(count: number): Promise<void>;
  readonly count: number;
} {
  const limiter = app.get(RateLimiter);
  const original = limiter.release.bind(limiter);
  let count = 0;
  const waiting = new Set<{ count: number; resolve: () => void }>();
  jest.spyOn(limiter, 'release').mockImplementation((decisions, leaseMs) => {
    const refunded = original(decisions, leaseMs);
    const done = (): void => {
      count++;
      for (const waiter of waiting) {
        if (waiter.count > count) continue;
        waiting.delete(waiter);
        waiter.resolve();
      }
    };
    void refunded.then(done, done);
    return refunded;
  });
  return {
    released(target) {
      if (count >= target) return Promise.resolve();
      return new Promise((resolve) => waiting.add({ count: target, resolve }));
    },
    get count() {
      return count;
    },
  };
}
