/**
 * @nestjs/throttler beyond plain HTTP routes.
 *
 * NT's README subclasses (`GqlThrottlerGuard` overriding `getRequestResponse` for Apollo on
 * Express, `WsThrottlerGuard` overriding `handleRequest` for a socket.io gateway), written as the
 * README writes them, with only the import path changed: against the real `@nestjs/throttler`
 * and against `nestjs-ratelimit/throttler`, in memory and on Redis.
 *
 * Then what ours does without a subclass, where NT fails (nestjs/throttler#2382): the plain
 * `ThrottlerGuard` on a GraphQL resolver (Apollo over HTTP), on a socket.io gateway, and on a TCP
 * microservice's message handler.
 */
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type Type,
  UseGuards,
} from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { GqlExecutionContext, GraphQLModule, Query, Resolver } from '@nestjs/graphql';
import { MessagePattern } from '@nestjs/microservices';
import { ExpressAdapter } from '@nestjs/platform-express';
import { Test } from '@nestjs/testing';
import type { ThrottlerGuard as NtThrottlerGuard, ThrottlerRequest } from '@nestjs/throttler';
import { MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { closeApp } from '../support/app.js';
import {
  GATEWAY_ADAPTERS,
  type GatewayAdapterName,
  type GatewayApp,
  startGatewayApp,
} from '../support/gateway-apps.js';
import { RecordingLogger } from '../support/graphql-apps.js';
import { startMicroservice } from '../support/microservice-apps.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import { IMPLEMENTATIONS, type ImplementationName, load, type Loaded } from '../support/throttler/implementations.js';

const TOO_MANY = 'ThrottlerException: Too Many Requests';

@Resolver()
class GreetingResolver {
  @Query(() => String)
  hello(): string {
    return 'world';
  }
}

/** A GraphQL answer's body. */
interface GraphqlBody {
  data?: Record<string, unknown> | null;
  errors?: Array<{ message: string; path?: unknown[]; extensions?: Record<string, unknown> }>;
}

/** A started Apollo-on-Express app, a client for `/graphql`, and what it logged. */
interface GraphqlApp {
  logger: RecordingLogger;
  query(query: string): Promise<{ status: number; headers: Record<string, string>; body: GraphqlBody }>;
  close(): Promise<void>;
}

async function startGraphql(throttlerModule: ReturnType<Loaded['forRoot']>, guard: Type, context?: unknown) {
  @Module({
    imports: [
      throttlerModule,
      GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
        ...(context === undefined ? {} : { context }),
      }),
    ],
    providers: [GreetingResolver, { provide: APP_GUARD, useClass: guard }],
  })
  class GraphqlModule {}
  const logger = new RecordingLogger();
  const moduleRef = await Test.createTestingModule({ imports: [GraphqlModule] }).compile();
  const app: INestApplication = moduleRef.createNestApplication(new ExpressAdapter(), { logger });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  const graphql: GraphqlApp = {
    logger,
    async query(query) {
      const response = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ query }),
      });
      return {
        status: response.status,
        headers: Object.fromEntries(response.headers.entries()),
        body: (await response.json()) as GraphqlBody,
      };
    },
    close: () => closeApp(app),
  };
  return graphql;
}

/** A socket.io gateway: `events` answers with what it was sent, under `guard` if one is given. */
function eventsGateway(guard: Type): Type {
  @UseGuards(guard)
  @WebSocketGateway()
  class EventsGateway {
    @SubscribeMessage('events')
    handle(@MessageBody() data: unknown) {
      return { event: 'events', data };
    }
  }
  return EventsGateway;
}

async function startGateway(
  throttlerModule: ReturnType<Loaded['forRoot']>,
  gateway: Type,
  adapter: GatewayAdapterName = 'socket.io',
): Promise<GatewayApp> {
  @Module({ imports: [throttlerModule], providers: [gateway] })
  class GatewayModule {}
  return startGatewayApp(GatewayModule, adapter);
}

const redis = useTestRedis();

const SUBCLASS_TARGETS = IMPLEMENTATIONS.flatMap((name) =>
  (['memory', 'redis'] as const).map((store) => [name, store] as const),
);

describe.each(SUBCLASS_TARGETS)(
  "NT's README guard subclasses on %s, %s storage",
  (implementation: ImplementationName, store) => {
    let target: Loaded;
    beforeAll(async () => {
      target = await load(implementation, store, redis);
    });

    it('GraphQL: GqlThrottlerGuard reading req and res from the GraphQL context (Apollo on Express)', async () => {
      const { ThrottlerGuard } = target.api;

      @Injectable()
      class GqlThrottlerGuard extends ThrottlerGuard {
        override getRequestResponse(context: ExecutionContext) {
          const gqlCtx = GqlExecutionContext.create(context);
          const ctx = gqlCtx.getContext<{ req: Record<string, any>; res: Record<string, any> }>();
          return { req: ctx.req, res: ctx.res };
        }
      }

      const graphql = await startGraphql(
        target.forRoot([{ ttl: 60000, limit: 2 }]),
        GqlThrottlerGuard,
        ({ req, res }: { req: unknown; res: unknown }) => ({ req, res }),
      );
      try {
        const first = await graphql.query('{ hello }');
        expect(first.body).toEqual({ data: { hello: 'world' } });
        expect(first.headers).toMatchObject({ 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '1' });
        expect((await graphql.query('{ hello }')).body).toEqual({ data: { hello: 'world' } });
        const refused = await graphql.query('{ hello }');
        expect(refused.body.data).toBeNull();
        expect(refused.body.errors).toEqual([expect.objectContaining({ message: TOO_MANY, path: ['hello'] })]);
      } finally {
        await graphql.close();
      }
    });

    it('WebSockets: WsThrottlerGuard overriding handleRequest on a socket.io gateway', async () => {
      const { ThrottlerGuard } = target.api;

      @Injectable()
      class WsThrottlerGuard extends ThrottlerGuard {
        override async handleRequest(requestProps: ThrottlerRequest): Promise<boolean> {
          const { context, limit, ttl, throttler, blockDuration, generateKey } = requestProps;

          const client = context.switchToWs().getClient<{ conn: { remoteAddress: string } }>();
          // socket.io: the engine.io connection's address (the README's hint)
          const tracker = client.conn.remoteAddress;
          const key = generateKey(context, tracker, throttler.name!);
          const { totalHits, timeToExpire, isBlocked, timeToBlockExpire } = await this.storageService.increment(
            key,
            ttl,
            limit,
            blockDuration,
            throttler.name!,
          );

          // Throw an error when the user reached their limit.
          if (isBlocked) {
            await this.throwThrottlingException(context, {
              limit,
              ttl,
              key,
              tracker,
              totalHits,
              timeToExpire,
              isBlocked,
              timeToBlockExpire,
            });
          }

          return true;
        }
      }

      const gateway = await startGateway(target.forRoot([{ ttl: 60000, limit: 2 }]), eventsGateway(WsThrottlerGuard));
      try {
        const client = await gateway.connect();
        expect(await client.ask('events', 1)).toEqual({ event: 'events', data: 1 });
        expect(await client.ask('events', 2)).toEqual({ event: 'events', data: 2 });
        // Nest emits an `exception` event for the refusal; the handler does not run
        expect(await client.ask('events', 3)).toEqual({
          event: 'exception',
          data: expect.objectContaining({ status: 'error' }) as unknown,
        });
        expect(client.open).toBe(true);
      } finally {
        await gateway.close();
      }
    });
  },
);

describe('without a subclass: NT', () => {
  it("GraphQL: NT's plain guard fails every query instead (nestjs/throttler#2382)", async () => {
    const nt = await load('@nestjs/throttler', 'memory');
    const graphql = await startGraphql(nt.forRoot([{ ttl: 60000, limit: 1 }]), nt.api.ThrottlerGuard);
    try {
      const first = await graphql.query('{ hello }');
      expect(first.body.data).toBeNull();
      expect(first.body.errors?.[0]?.message).not.toBe(TOO_MANY);
    } finally {
      await graphql.close();
    }
  });
});

describe('without a subclass (ours only; NT needs one)', () => {
  let ours: Loaded;
  beforeAll(async () => {
    ours = await load('nestjs-ratelimit/throttler', 'memory');
  });

  it('GraphQL (Apollo over HTTP): the plain guard limits a resolver; over the limit, a GraphQL error', async () => {
    const graphql = await startGraphql(ours.forRoot([{ ttl: 60000, limit: 1 }]), ours.api.ThrottlerGuard);
    try {
      const first = await graphql.query('{ hello }');
      expect(first.body).toEqual({ data: { hello: 'world' } });
      // the headers go to the operation's HTTP response
      expect(first.headers).toMatchObject({ 'x-ratelimit-limit': '1', 'x-ratelimit-remaining': '0' });
      const refused = await graphql.query('{ hello }');
      expect(refused.status).toBe(200);
      expect(refused.body.data).toBeNull();
      expect(refused.body.errors).toEqual([expect.objectContaining({ message: TOO_MANY, path: ['hello'] })]);
      // the server goes on answering
      expect((await graphql.query('{ __typename }')).body).toEqual({ data: { __typename: 'Query' } });
    } finally {
      await graphql.close();
    }
  });

  it.each(GATEWAY_ADAPTERS)(
    '%s gateway: the plain guard limits a message; the client gets an exception with statusCode 429 and stays connected',
    async (adapter) => {
      const gateway = await startGateway(
        ours.forRoot([{ ttl: 60000, limit: 1 }]),
        eventsGateway(ours.api.ThrottlerGuard as Type<NtThrottlerGuard>),
        adapter,
      );
      try {
        const client = await gateway.connect();
        expect(await client.ask('events', 1)).toEqual({ event: 'events', data: 1 });
        const refused = await client.ask('events', 2);
        expect(refused).toEqual({ event: 'exception', data: expect.objectContaining({ statusCode: 429 }) as unknown });
        expect(client.open).toBe(true);
        // a second client from the same address shares the count (the tracker is the address)
        const other = await gateway.connect();
        expect((await other.ask('events', 3)).event).toBe('exception');
        expect(gateway.logged.error).toEqual([]);
      } finally {
        await gateway.close();
      }
    },
  );

  it('TCP microservice: the plain guard limits a message handler; the caller gets a 429 error object', async () => {
    const { ThrottlerGuard } = ours.api;
    @UseGuards(ThrottlerGuard)
    @Controller()
    class PingController {
      @MessagePattern('ping')
      ping() {
        return 'pong';
      }
    }
    @Module({ imports: [ours.forRoot([{ ttl: 60000, limit: 1 }])], controllers: [PingController] })
    class MicroserviceModule {}
    const service = await startMicroservice(MicroserviceModule);
    try {
      expect(await service.send('ping', {})).toBe('pong');
      await expect(service.send('ping', {})).rejects.toMatchObject({ statusCode: 429 });
      // the connection still serves: a refusal is an answer
      await expect(service.send('ping', {})).rejects.toMatchObject({ statusCode: 429 });
    } finally {
      await service.close();
    }
  });
});
