/**
 * Token budgets (issue 40) beyond HTTP routes, with a `MemoryStore` and a `RedisStore` (the test
 * Redis), both on a `ManualClock`: a GraphQL field (Apollo on Express, Mercurius on Fastify) whose
 * policy settles from its resolver's result, or from its meter; a socket.io gateway message that
 * settles from its handler's return value, or its meter; a TCP microservice message that settles
 * from its reply. A handler that fails before it answers keeps its reservation. A test waits for
 * the settles a request's end makes (`SettleWatch`), never for time.
 */
import { randomUUID } from 'node:crypto';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Controller, type INestApplication, Module } from '@nestjs/common';
import { Args, Field, GraphQLModule, Int, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { MessageBody, SubscribeMessage, WebSocketGateway, WsException } from '@nestjs/websockets';
import type { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimiterService,
  RateLimitMeter,
  RateLimitModule,
  type RateLimitPolicy,
  RedisStore,
} from '../../lib/index.js';
import { ManualClock } from '../../lib/testing/index.js';
import { CASE_EPOCH } from '../cases/cases.js';
import { closeApp } from '../support/app.js';
import { type GatewayApp, startGatewayApp } from '../support/gateway-apps.js';
import { startMicroservice, type TestMicroservice } from '../support/microservice-apps.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { newKey, SettleWatch } from '../support/token-budget-apps.js';

const STORES = ['memory', 'redis'] as const;
type StoreName = (typeof STORES)[number];

/** 1,000 tokens an hour (a test refills nothing), 100 reserved up front. */
const BUDGET = { limit: 1_000, window: '1h', unit: 'tokens', cost: 100, maxDebt: 1_000 } satisfies RateLimitPolicy;

interface Completion {
  usage: { total_tokens: number };
}

const completion = (tokens: number): Completion => ({ usage: { total_tokens: tokens } });

/** A store of `storeName` on `clock`, with a watch on its settles; `close` closes both it and its client. */
async function openStore(storeName: StoreName, clock: ManualClock) {
  const redis: Redis | undefined = storeName === 'redis' ? await connectTestRedis() : undefined;
  const store = redis === undefined ? new MemoryStore({ clock }) : new RedisStore({ client: redis, clock });
  return {
    store,
    settles: new SettleWatch(store),
    prefix: `rl-e2e-tb-transports-${randomUUID()}:`,
    close: async () => {
      await store.close?.();
      await redis?.quit();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// GraphQL

@ObjectType()
class Answer {
  @Field(() => Int)
  tokens!: number;

  @Field(() => String)
  text!: string;
}

const GQL_TOKENS = {
  name: 'gql-tokens',
  ...BUDGET,
  key: 'api-key',
  settle: (answer: Answer) => answer.tokens,
} satisfies RateLimitPolicy;

@Resolver()
class CompletionResolver {
  @RateLimit(GQL_TOKENS)
  @Query(() => Answer)
  complete(@Args('tokens', { type: () => Int }) tokens: number): Answer {
    return { tokens, text: 'done' };
  }

  /** Fails before it answers: nothing to settle from. */
  @RateLimit(GQL_TOKENS)
  @Query(() => Answer, { nullable: true })
  failing(): Answer {
    throw new Error('the model is down');
  }

  /** Counts its cost on its meter: what it returns says nothing of it. */
  @RateLimit(GQL_TOKENS)
  @Query(() => String)
  metered(@Args('tokens', { type: () => Int }) tokens: number, @RateLimitMeter() meter: RateLimitMeter): string {
    meter.add(tokens);
    return 'counted';
  }
}

const DRIVERS = ['apollo', 'mercurius'] as const;
const GRAPHQL_SUITES = DRIVERS.flatMap((driver) => STORES.map((store) => [driver, store] as const));

describe.each(GRAPHQL_SUITES)('token budgets in GraphQL on %s, %s store', (driver, storeName) => {
  const clock = new ManualClock(CASE_EPOCH);
  let opened: Awaited<ReturnType<typeof openStore>>;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    opened = await openStore(storeName, clock);
    const graphql =
      driver === 'apollo'
        ? GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true })
        : GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, autoSchemaFile: true });
    @Module({
      imports: [RateLimitModule.forRoot({ store: opened.store, prefix: opened.prefix }), graphql],
      providers: [CompletionResolver],
    })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication(driver === 'apollo' ? new ExpressAdapter() : new FastifyAdapter(), {
      logger: false,
    });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    if (app !== undefined) await closeApp(app);
    await opened?.close();
  });

  const query = async (text: string, key: string) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key },
      body: JSON.stringify({ query: text }),
    });
    return (await response.json()) as { data?: Record<string, unknown> | null; errors?: { message: string }[] };
  };
  const used = async (key: string) => (await app.get(RateLimiterService).usage(`api-key:${key}`, GQL_TOKENS)).used;

  it("settles a field from its resolver's result", async () => {
    const key = newKey();
    const answer = await opened.settles.after(1, () => query('{ complete(tokens: 400) { tokens text } }', key));
    expect(answer).toEqual({ data: { complete: { tokens: 400, text: 'done' } } });
    expect(await used(key)).toBe(400);
    await opened.settles.after(1, () => query('{ complete(tokens: 30) { tokens } }', key));
    expect(await used(key)).toBe(430);
  });

  it('settles a field from its meter', async () => {
    const key = newKey();
    const answer = await opened.settles.after(1, () => query('{ metered(tokens: 250) }', key));
    expect(answer).toEqual({ data: { metered: 'counted' } });
    expect(await used(key)).toBe(250);
  });

  it('keeps the reservation of a resolver that fails before it answers', async () => {
    const key = newKey();
    const failed = await query('{ failing { tokens } }', key);
    expect(failed.errors?.[0]?.message).toBe('the model is down');
    // no settle for it: the next field's settle landing shows its end has come and gone
    await opened.settles.after(1, () => query('{ complete(tokens: 100) { tokens } }', key));
    expect(await used(key)).toBe(100 + 100);
  });
});

// ---------------------------------------------------------------------------------------------
// A socket.io gateway

const WS_TOKENS = {
  name: 'ws-tokens',
  ...BUDGET,
  key: 'api-key',
  settle: (reply: { data: Completion }) => reply.data.usage.total_tokens,
} satisfies RateLimitPolicy;

@WebSocketGateway()
class CompletionGateway {
  @RateLimit(WS_TOKENS)
  @SubscribeMessage('complete')
  complete(@MessageBody() body: { tokens: number }) {
    return { event: 'completed', data: completion(body.tokens) };
  }

  @RateLimit(WS_TOKENS)
  @SubscribeMessage('metered')
  metered(@MessageBody() body: { tokens: number }, @RateLimitMeter() meter: RateLimitMeter) {
    meter.add(body.tokens);
    return { event: 'metered', data: { counted: meter.count } };
  }

  @RateLimit(WS_TOKENS)
  @SubscribeMessage('failing')
  failing(): never {
    throw new WsException('the model is down');
  }
}

describe.each(STORES)('token budgets in a socket.io gateway, %s store', (storeName) => {
  const clock = new ManualClock(CASE_EPOCH);
  let opened: Awaited<ReturnType<typeof openStore>>;
  let gateway: GatewayApp;

  beforeAll(async () => {
    opened = await openStore(storeName, clock);
    @Module({
      imports: [RateLimitModule.forRoot({ store: opened.store, prefix: opened.prefix })],
      providers: [CompletionGateway],
    })
    class AppModule {}
    gateway = await startGatewayApp(AppModule, 'socket.io');
  });
  afterAll(async () => {
    await gateway?.close();
    await opened?.close();
  });

  const used = async (key: string) =>
    (await gateway.app.get(RateLimiterService).usage(`api-key:${key}`, WS_TOKENS)).used;

  it("settles a message from its handler's return value", async () => {
    const key = newKey();
    const client = await gateway.connect({ headers: { 'x-api-key': key } });
    const reply = await opened.settles.after(1, () => client.ask('complete', { tokens: 400 }));
    expect(reply).toEqual({ event: 'completed', data: completion(400) });
    expect(await used(key)).toBe(400);
    await opened.settles.after(1, () => client.ask('complete', { tokens: 20 }));
    expect(await used(key)).toBe(420);
  });

  it('settles a message from its meter', async () => {
    const key = newKey();
    const client = await gateway.connect({ headers: { 'x-api-key': key } });
    const reply = await opened.settles.after(1, () => client.ask('metered', { tokens: 321 }));
    expect(reply).toEqual({ event: 'metered', data: { counted: 321 } });
    expect(await used(key)).toBe(321);
  });

  it('keeps the reservation of a handler that fails before it answers', async () => {
    const key = newKey();
    const client = await gateway.connect({ headers: { 'x-api-key': key } });
    expect(await client.ask('failing', {})).toMatchObject({ event: 'exception' });
    await opened.settles.after(1, () => client.ask('complete', { tokens: 100 }));
    expect(await used(key)).toBe(100 + 100);
    expect(gateway.logged.error).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// A TCP microservice

const RPC_TOKENS = {
  name: 'rpc-tokens',
  ...BUDGET,
  key: (context) => context.switchToRpc().getData<{ tenant: string }>().tenant,
  settle: (reply: Completion) => reply.usage.total_tokens,
} satisfies RateLimitPolicy;

@Controller()
class CompletionController {
  @RateLimit(RPC_TOKENS)
  @MessagePattern('complete')
  complete(@Payload() data: { tenant: string; tokens: number }): Completion {
    return completion(data.tokens);
  }

  @RateLimit(RPC_TOKENS)
  @MessagePattern('failing')
  failing(): Completion {
    throw new RpcException('the model is down');
  }
}

describe.each(STORES)('token budgets in a TCP microservice, %s store', (storeName) => {
  const clock = new ManualClock(CASE_EPOCH);
  let opened: Awaited<ReturnType<typeof openStore>>;
  let service: TestMicroservice;

  beforeAll(async () => {
    opened = await openStore(storeName, clock);
    @Module({
      imports: [RateLimitModule.forRoot({ store: opened.store, prefix: opened.prefix })],
      controllers: [CompletionController],
    })
    class MicroserviceModule {}
    service = await startMicroservice(MicroserviceModule);
  });
  afterAll(async () => {
    await service?.close();
    await opened?.close();
  });

  const used = async (tenant: string) =>
    (await service.get(RateLimiterService).usage(`custom:${tenant}`, RPC_TOKENS)).used;

  it('settles a message from its reply', async () => {
    const tenant = newKey();
    const reply = await opened.settles.after(1, () => service.send('complete', { tenant, tokens: 600 }));
    expect(reply).toEqual(completion(600));
    expect(await used(tenant)).toBe(600);
    await opened.settles.after(1, () => service.send('complete', { tenant, tokens: 5 }));
    expect(await used(tenant)).toBe(605);
  });

  it('keeps the reservation of a handler that fails before it answers', async () => {
    const tenant = newKey();
    await expect(service.send('failing', { tenant })).rejects.toMatchObject({ message: 'the model is down' });
    await opened.settles.after(1, () => service.send('complete', { tenant, tokens: 100 }));
    expect(await used(tenant)).toBe(100 + 100);
  });
});
