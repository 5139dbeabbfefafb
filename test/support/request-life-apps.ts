import type { ServerResponse } from 'node:http';
import { request } from 'node:http';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  type CallHandler,
  type CanActivate,
  Controller,
  type ExecutionContext,
  Get,
  Headers,
  Injectable,
  type INestApplication,
  Module,
  type NestInterceptor,
  Res,
  StreamableFile,
  type Type,
  UseGuards,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { Context, GraphQLModule, Query, Resolver } from '@nestjs/graphql';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import { ConnectedSocket, MessageBody, SubscribeMessage, WebSocketGateway, WsException } from '@nestjs/websockets';
import { map, type Observable, of } from 'rxjs';
import {
  RateLimit,
  RateLimiterService,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
} from '../../lib/index.js';
import { RateLimiter } from '../../lib/limiter/rate-limiter.js';
import { closeApp, startApp } from './app.js';
import { type GatewayClient, startGatewayApp } from './gateway-apps.js';
import { startMicroservice } from './microservice-apps.js';
import { type Ask, type ClientWatch, FIRST_CHUNK, LAST_CHUNK, Life, NEVER_GONE } from './request-life.js';

/**
 * The apps of `test/e2e/request-life.e2e-spec.ts`: one route under a `concurrency` policy
 * (`lifePolicy`, 2 in flight per client) on HTTP (Express, Fastify), GraphQL (Apollo), a
 * socket.io gateway and a TCP microservice, each with a streamed variant where the transport has
 * one, a guard after the module's that refuses on request (`LaterGuard`), and a global
 * interceptor that answers on request without the handler (`CacheInterceptor`). Each handler
 * works until the test ends it, or its client goes (see `Life`); a client of each app sends a
 * request and can hang up (`LifeApp.send`).
 */

/** Slots per client. */
export const LIMIT = 2;

/** Every request of every app here: the test's eye on them. */
export const life = new Life(LIMIT);

/**
 * The policy under test, keyed by the client a request names (`custom:<client>`): 2 in flight; a
 * slot no one gives back would be held for 10 minutes, so a slot is never freed by its lease here.
 */
export const lifePolicy: RateLimitPolicy = {
  name: 'life',
  algorithm: 'concurrency',
  limit: LIMIT,
  lease: '10m',
  key: lifeKey,
};

/** The identity `lifePolicy` limits a client's requests as. */
export const identityOf = (client: string): string => `custom:${client}`;

/** The key function: watches the client from before the decision, and holds the decision when the request asks. */
function lifeKey(context: ExecutionContext): string | Promise<string> {
  const ask = askOf(context)!;
  life.asked(ask.id, clientOf(context));
  return ask.hold ? life.keyGate(ask.id).then(() => ask.client) : ask.client;
}

/** The request's `Ask`: HTTP and GraphQL in the `x-ask` header, a message in its payload. */
export function askOf(context: ExecutionContext): Ask | undefined {
  switch (context.getType<string>()) {
    case 'http':
      return parse(context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>().headers['x-ask']);
    case 'graphql':
      return parse(context.getArgByIndex<GraphqlContext>(2).req.headers['x-ask']);
    case 'ws':
      return context.switchToWs().getData<Ask>();
    default:
      return context.switchToRpc().getData<Ask>();
  }
}

const parse = (header: unknown): Ask | undefined =>
  typeof header === 'string' ? (JSON.parse(header) as Ask) : undefined;

/** Apollo on Express: the GraphQL context holds the Express request, which holds its response. */
interface GraphqlContext {
  req: { headers: Record<string, unknown>; res: ServerResponse };
}

/** The client of the request in `context`, as its transport tells that it has gone (a TCP message's never does). */
function clientOf(context: ExecutionContext): ClientWatch {
  switch (context.getType<string>()) {
    case 'http':
      return responseWatch(context.switchToHttp().getResponse());
    case 'graphql':
      return responseWatch(context.getArgByIndex<GraphqlContext>(2).req.res);
    case 'ws':
      return socketWatch(context.switchToWs().getClient());
    default:
      return NEVER_GONE;
  }
}

/** An HTTP client, by its response (Express's, or Fastify's reply around Node's): gone when the response closed unfinished. */
function responseWatch(response: unknown): ClientWatch {
  const raw = ((response as { raw?: ServerResponse }).raw ?? response) as ServerResponse;
  return {
    get gone() {
      return raw.destroyed && !raw.writableFinished;
    },
    onGone(listener) {
      const closed = (): void => {
        if (!raw.writableFinished) listener();
      };
      raw.once('close', closed);
      return () => void raw.off('close', closed);
    },
  };
}

/** A socket.io client: gone once disconnected. */
interface IoSocket {
  disconnected: boolean;
  once(event: 'disconnect', listener: () => void): unknown;
  off(event: 'disconnect', listener: () => void): unknown;
}

function socketWatch(socket: IoSocket): ClientWatch {
  return {
    get gone() {
      return socket.disconnected;
    },
    onGone(listener) {
      socket.once('disconnect', listener);
      return () => void socket.off('disconnect', listener);
    },
  };
}

/** A guard after the module's global one: it refuses the requests that ask it to. */
@Injectable()
export class LaterGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return askOf(context)?.refuse !== true;
  }
}

/** A global interceptor that answers the requests that ask it to from its "cache", without their handler. */
@Injectable()
export class CacheInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ask = askOf(context);
    if (ask?.cached !== true) return next.handle();
    const type = context.getType<string>();
    if (type === 'graphql') return of(CACHED);
    return of(type === 'ws' ? { event: 'life', data: { id: ask.id, cached: true } } : { id: ask.id, cached: true });
  }
}

/** What GraphQL's `life` answers from the cache. */
const CACHED = 'cached';

// ---------------------------------------------------------------------------------------------
// The handlers

@Controller('life')
class LifeController {
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @Get()
  async work(@Headers('x-ask') header: string, @Res({ passthrough: true }) response: unknown) {
    const ask = parse(header)!;
    const ending = await life.work(ask, responseWatch(response));
    if (ending === 'error') throw new Error(`request ${ask.id} failed`);
    return { id: ask.id };
  }

  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @Get('stream')
  stream(@Headers('x-ask') header: string, @Res({ passthrough: true }) response: unknown) {
    const ask = parse(header)!;
    return new StreamableFile(life.stream(ask, responseWatch(response)), { type: 'text/plain' });
  }
}

@Resolver()
class LifeResolver {
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @Query(() => String, { name: 'life', nullable: true })
  async work(@Context('req') req: GraphqlContext['req']): Promise<string> {
    const ask = parse(req.headers['x-ask'])!;
    const ending = await life.work(ask, responseWatch(req.res));
    if (ending === 'error') throw new Error(`request ${ask.id} failed`);
    return ask.id;
  }
}

@WebSocketGateway()
class LifeGateway {
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @SubscribeMessage('life')
  async work(@MessageBody() ask: Ask, @ConnectedSocket() socket: IoSocket) {
    const ending = await life.work(ask, socketWatch(socket));
    if (ending === 'error') throw new WsException(`request ${ask.id} failed`);
    return { event: 'life', data: { id: ask.id } };
  }

  /** Each chunk as a `chunk` event; an error as an `exception`. */
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @SubscribeMessage('life-stream')
  stream(@MessageBody() ask: Ask, @ConnectedSocket() socket: IoSocket) {
    return life
      .observe(ask, socketWatch(socket), (message) => new WsException(message))
      .pipe(map((chunk) => ({ event: 'chunk', data: chunk })));
  }
}

@Controller()
class LifeMessages {
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @MessagePattern('life')
  async work(@Payload() ask: Ask) {
    const ending = await life.work(ask, NEVER_GONE);
    if (ending === 'error') throw new RpcException(`request ${ask.id} failed`);
    return { id: ask.id };
  }

  /** Each chunk as a reply; an error as the reply that ends them. */
  @RateLimit(lifePolicy)
  @UseGuards(LaterGuard)
  @MessagePattern('life-stream')
  stream(@Payload() ask: Ask) {
    return life.observe(ask, NEVER_GONE, (message) => new RpcException(message));
  }
}

// ---------------------------------------------------------------------------------------------
// The apps and their clients

/** The transports the apps run on. */
export const TRANSPORTS = ['express', 'fastify', 'graphql', 'socket.io', 'tcp'] as const;
export type TransportName = (typeof TRANSPORTS)[number];

/**
 * How a request ended as its client saw it: answered (`ok`, `cached`: by the interceptor), failed
 * (`error`: the handler's; `stream-error`: a streamed answer cut short), refused (`refused`: 429,
 * `forbidden`: the later guard, `unavailable`: the store failed), or given up by its client
 * (`aborted`). Anything else is described as it came.
 */
export type Answer =
  | 'ok'
  | 'cached'
  | 'error'
  | 'stream-error'
  | 'refused'
  | 'forbidden'
  | 'unavailable'
  | 'aborted'
  | `unexpected ${string}`;

/** A request sent. */
export interface Sent {
  /** How it ended, as its client saw it; never rejects. */
  readonly answer: Promise<Answer>;
  /** Resolves when the first chunk of a streamed answer has reached the client. */
  readonly firstChunk: Promise<void>;
  /** Hangs up: the client goes (absent where a client cannot give up one request). */
  readonly abort?: () => void;
}

/** A started app, its engine, and a client of it. */
export interface LifeApp {
  readonly limiter: RateLimiter;
  readonly service: RateLimiterService;
  send(ask: Ask): Sent;
  close(): Promise<void>;
}

/** Starts the app of a transport under the module's `options`; the global interceptor is the app's own. */
export async function startLifeApp(transport: TransportName, options: RateLimitModuleOptions): Promise<LifeApp> {
  const interceptor = { provide: APP_INTERCEPTOR, useClass: CacheInterceptor };
  switch (transport) {
    case 'express':
    case 'fastify': {
      @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [LifeController], providers: [interceptor] })
      class HttpLifeModule {}
      const http = await startApp(HttpLifeModule, transport);
      return lifeApp(http.app, (ask) => httpSend(http.url, ask.stream ? '/life/stream' : '/life', ask), http.close);
    }
    case 'graphql': {
      @Module({
        imports: [
          RateLimitModule.forRoot(options),
          GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true, graphiql: false }),
        ],
        providers: [LifeResolver, interceptor],
      })
      class GraphqlLifeModule {}
      const app = await startNest(GraphqlLifeModule);
      const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
      return lifeApp(
        app,
        (ask) => httpSend(url, '/graphql', ask, JSON.stringify({ query: '{ life }' })),
        () => closeApp(app),
      );
    }
    case 'socket.io': {
      @Module({ imports: [RateLimitModule.forRoot(options)], providers: [LifeGateway, interceptor] })
      class GatewayLifeModule {}
      const gateway = await startGatewayApp(GatewayLifeModule, 'socket.io');
      return lifeApp(gateway.app, (ask) => ioSend(gateway.connect(), ask), gateway.close);
    }
    case 'tcp': {
      @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [LifeMessages], providers: [interceptor] })
      class MicroserviceLifeModule {}
      const service = await startMicroservice(MicroserviceLifeModule);
      return {
        limiter: service.get(RateLimiter),
        service: service.get(RateLimiterService),
        send: (ask) => tcpSend(service.client.send<unknown>(ask.stream ? 'life-stream' : 'life', ask), ask),
        close: service.close,
      };
    }
  }
}

async function startNest(module: Type): Promise<INestApplication> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const app = moduleRef.createNestApplication(new ExpressAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  return app;
}

function lifeApp(app: INestApplication, send: LifeApp['send'], close: () => Promise<void>): LifeApp {
  return { limiter: app.get(RateLimiter), service: app.get(RateLimiterService), send, close };
}

/** A settable promise of an answer, the first setting wins. */
function answered(): { answer: Promise<Answer>; set(answer: Answer): void; chunk(): void; firstChunk: Promise<void> } {
  let set!: (answer: Answer) => void;
  let chunk!: () => void;
  const answer = new Promise<Answer>((resolve) => (set = resolve));
  const firstChunk = new Promise<void>((resolve) => (chunk = resolve));
  return { answer, set, chunk, firstChunk };
}

/**
 * A request with node:http on a connection of its own (closed after the answer), so that the
 * test can hang up on it; `body` makes it a POST of JSON (GraphQL).
 */
function httpSend(url: string, path: string, ask: Ask, body?: string): Sent {
  const { hostname, port } = new URL(url);
  const headers: Record<string, string> = { 'x-ask': JSON.stringify(ask) };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const req = request({
    host: hostname,
    port,
    path,
    method: body === undefined ? 'GET' : 'POST',
    agent: false,
    headers,
  });
  const { answer, set, chunk, firstChunk } = answered();
  // a hang-up is the test's own doing
  req.on('error', () => undefined);
  let responded = false;
  req.once('close', () => {
    if (!responded) set('aborted');
  });
  req.once('response', (response) => {
    responded = true;
    let text = '';
    response.setEncoding('utf8');
    response.on('data', (data: string) => {
      text += data;
      chunk();
    });
    response.once('end', () => {
      try {
        set(path === '/graphql' ? graphqlAnswer(text) : httpAnswer(response.statusCode!, text));
      } catch {
        set(`unexpected ${response.statusCode} ${text}`);
      }
    });
    // cut short: the connection closed mid-answer
    response.once('close', () => {
      if (!response.complete) set(text === '' ? 'aborted' : 'stream-error');
    });
  });
  req.end(body);
  return { answer, firstChunk, abort: () => req.destroy() };
}

const HTTP_ANSWERS: Record<number, Answer> = { 429: 'refused', 403: 'forbidden', 500: 'error', 503: 'unavailable' };

function httpAnswer(status: number, text: string): Answer {
  if (status !== 200) return HTTP_ANSWERS[status] ?? `unexpected ${status} ${text}`;
  if (text.startsWith(FIRST_CHUNK)) return text === FIRST_CHUNK + LAST_CHUNK ? 'ok' : 'stream-error';
  const body = JSON.parse(text) as { cached?: boolean };
  return body.cached === true ? 'cached' : 'ok';
}

function graphqlAnswer(text: string): Answer {
  const body = JSON.parse(text) as {
    data?: { life?: string | null } | null;
    errors?: Array<{ message: string; extensions?: { code?: string } }>;
  };
  const [error] = body.errors ?? [];
  if (error === undefined) return body.data?.life === CACHED ? 'cached' : 'ok';
  if (error.extensions?.code === 'RATE_LIMITED') return 'refused';
  if (error.extensions?.code === 'RATE_LIMIT_UNAVAILABLE') return 'unavailable';
  return error.message === 'Forbidden resource' ? 'forbidden' : 'error';
}

/** A message on a socket.io connection of its own; hanging up disconnects it. */
function ioSend(connecting: Promise<GatewayClient>, ask: Ask): Sent {
  const { answer, set, chunk, firstChunk } = answered();
  let chunks = 0;
  void connecting.then(async (socket) => {
    socket.send(ask.stream ? 'life-stream' : 'life', ask);
    const read = async (): Promise<Answer> => {
      for (;;) {
        const received = await socket.next();
        const { event } = received;
        const data = received.data as unknown;
        if (event === 'chunk') {
          chunk();
          if (++chunks === 2) return 'ok';
          continue;
        }
        if (event === 'life') return (data as { cached?: boolean }).cached === true ? 'cached' : 'ok';
        if (event !== 'exception') return `unexpected ${event} ${JSON.stringify(data)}`;
        return chunks > 0 ? 'stream-error' : messageAnswer(data as MessageError);
      }
    };
    set(await Promise.race([read(), answer]));
    await socket.close();
  });
  return {
    answer,
    firstChunk,
    abort: () => {
      set('aborted');
      void connecting.then((socket) => socket.close());
    },
  };
}

/** What a refused or failed message's caller receives. */
interface MessageError {
  statusCode?: number;
  message?: string;
}

function messageAnswer(error: MessageError | undefined): Answer {
  if (error?.statusCode === 429) return 'refused';
  if (error?.statusCode === 503) return 'unavailable';
  return error?.message === 'Forbidden resource' ? 'forbidden' : 'error';
}

/** A message on the microservice's one TCP client: it cannot be given up alone. */
function tcpSend(replies: Observable<unknown>, ask: Ask): Sent {
  const { answer, set, chunk, firstChunk } = answered();
  let chunks = 0;
  let last: unknown;
  replies.subscribe({
    next: (reply) => {
      last = reply;
      if (reply === FIRST_CHUNK || reply === LAST_CHUNK) {
        chunks++;
        chunk();
      }
    },
    complete: () => {
      if (ask.stream) set(chunks === 2 ? 'ok' : `unexpected ${chunks} chunks`);
      else set((last as { cached?: boolean } | undefined)?.cached === true ? 'cached' : 'ok');
    },
    error: (error: MessageError) => set(chunks > 0 ? 'stream-error' : messageAnswer(error)),
  });
  return { answer, firstChunk };
}
