import { randomUUID } from 'node:crypto';
import { EventEmitter, on } from 'node:events';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type ExecutionContext, type INestApplication, Injectable, type LoggerService, Module } from '@nestjs/common';
import {
  Args,
  Field,
  Float,
  GqlExecutionContext,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
  Subscription,
} from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { GraphQLScalarType } from 'graphql';
import { type Client, createClient } from 'graphql-ws';
import type { Redis } from 'ioredis';
import WebSocket from 'ws';
import { MemoryStore, RateLimit, RateLimitModule, type RateLimitModuleOptions, RedisStore } from '../../lib/index.js';
import { closeApp } from './app.js';

/** The GraphQL drivers every GraphQL suite runs on: Apollo on Express, Mercurius on Fastify. */
export const DRIVERS = ['apollo', 'mercurius'] as const;
export type DriverName = (typeof DRIVERS)[number];

/** The stores every GraphQL suite runs on: a `MemoryStore`, and a `RedisStore` on the test Redis. */
export const STORES = ['memory', 'redis'] as const;
export type StoreName = (typeof STORES)[number];

/** Each driver on each store, for `describe.each`. */
export const GRAPHQL_SUITES = DRIVERS.flatMap((driver) => STORES.map((store) => [driver, store] as const));

/** Tokens per second of every policy here: nothing refills while a suite runs. */
const NO_REFILL = 0.001;

/** The arguments of the field a guard runs on, as a cost or key function reads them. */
export const fieldArgs = (context: ExecutionContext) =>
  GqlExecutionContext.create(context).getArgs<Record<string, unknown>>();

/** Events for the `ticks` subscription: the test emits `tick` with a number. */
@Injectable()
export class Ticker extends EventEmitter {
  /** Resolves once a subscription listens for ticks: those emitted from then on reach it. */
  listening(): Promise<void> {
    return new Promise((resolve) => {
      const added = (event: string | symbol) => {
        if (event !== 'tick') return;
        this.off('newListener', added);
        resolve();
      };
      this.on('newListener', added);
    });
  }
}

/**
 * Any JSON value, taken as it comes: lets a test hand a resolver's key and cost functions a
 * variable of any shape (deeply nested, wrong type) that the schema would otherwise reject.
 */
const Json = new GraphQLScalarType({ name: 'Json', parseValue: (value) => value, serialize: (value) => value });

/** Root queries and a subscription under one class-level policy (burst 2); `rare` has one of its own too. */
@RateLimit({ name: 'catalog', rps: NO_REFILL, burst: 2 })
@Resolver()
class CatalogResolver {
  constructor(private readonly ticker: Ticker) {}

  @Query(() => String, { nullable: true })
  books(): string {
    return 'books';
  }

  @Query(() => String, { nullable: true })
  authors(): string {
    return 'authors';
  }

  /** Under the class's policy and one of its own: one selection per client, ever. */
  @RateLimit({ name: 'rare', rps: NO_REFILL, burst: 1 })
  @Query(() => String, { nullable: true })
  rare(): string {
    return 'rare';
  }

  /** Each `tick` the test emits, as an event. */
  @Subscription(() => Int, { nullable: true, resolve: ([tick]: [number]) => tick })
  ticks(): AsyncIterator<unknown[]> {
    return on(this.ticker, 'tick');
  }
}

/** Field-level policies: a cost from the field's arguments, a cost over the burst, IP identity, hostile input. */
@Resolver()
class SearchResolver {
  /** Costs what it returns: the query-complexity example. */
  @RateLimit({ name: 'search', rps: NO_REFILL, burst: 20, cost: (context) => fieldArgs(context).first as number })
  @Query(() => [String], { nullable: true })
  search(@Args('first', { type: () => Int, defaultValue: 1 }) first: number): string[] {
    return Array.from({ length: first }, (_, index) => `result ${index}`);
  }

  // a function: a constant cost over the burst fails start
  @RateLimit({ name: 'bulk', rps: NO_REFILL, burst: 2, cost: () => 5 })
  @Query(() => String, { nullable: true })
  bulk(): string {
    return 'bulk';
  }

  @RateLimit({ name: 'by-ip', rps: NO_REFILL, burst: 2, key: 'ip' })
  @Query(() => String, { nullable: true })
  byIp(): string {
    return 'by-ip';
  }

  /** Keyed and weighed by whatever the client sends: `tenant` and `weight` as they come. */
  @RateLimit({
    name: 'tenant',
    rps: NO_REFILL,
    burst: 1000,
    key: [(context) => fieldArgs(context).tenant as string, 'api-key'],
    cost: (context) => fieldArgs(context).weight as number,
  })
  @Query(() => String, { nullable: true })
  tenant(
    @Args('tenant', { type: () => Json, nullable: true }) _tenant: unknown,
    @Args('weight', { type: () => Json, nullable: true }) _weight: unknown,
    @Args('ratio', { type: () => Float, nullable: true }) _ratio: number,
  ): string {
    return 'tenant';
  }
}

@ObjectType()
class Book {
  @Field(() => String)
  title!: string;
}

/** A field resolver under a policy: it runs once per book of a shelf, the guard with it (`fieldResolverEnhancers`). */
@Resolver(() => Book)
class BookResolver {
  @Query(() => [Book])
  shelf(): Book[] {
    return [{ title: 'Emma' }, { title: 'Persuasion' }, { title: 'Sanditon' }];
  }

  @RateLimit({ name: 'reviews', rps: NO_REFILL, burst: 2 })
  @ResolveField(() => String, { nullable: true })
  reviews(@Parent() book: Book): string {
    return `reviews of ${book.title}`;
  }
}

/** Failed logins counted (`count: 'failures'`): a wrong password is the field's error. */
@Resolver()
class LoginResolver {
  @RateLimit({ name: 'gql-login', limit: 2, window: '15m', key: 'header:x-client', count: 'failures' })
  @Query(() => String, { nullable: true })
  login(@Args('password', { type: () => String }) password: string): string {
    return signIn(password);
  }

  /** The README's login protection as a mutation, whose root fields GraphQL runs one after another: 3 failures, then an hour's block. */
  @RateLimit({
    name: 'gql-sign-in',
    limit: 3,
    window: '15m',
    key: 'header:x-client',
    count: 'failures',
    blockFor: '1h',
  })
  @Mutation(() => String, { nullable: true })
  signIn(@Args('password', { type: () => String }) password: string): string {
    return signIn(password);
  }
}

/** `'welcome'` for the right password; else the field's error. */
function signIn(password: string): string {
  if (password !== 'right') throw new Error('wrong password');
  return 'welcome';
}

/** What the app logged at `error` and `warn`: Nest logs an error for each exception it does not know. */
export class RecordingLogger implements LoggerService {
  readonly errors: unknown[][] = [];
  readonly warnings: unknown[][] = [];
  log(): void {}
  error(...message: unknown[]): void {
    this.errors.push(message);
  }
  warn(...message: unknown[]): void {
    this.warnings.push(message);
  }
}

/** A started GraphQL app, a client for it, and what it logged. */
export interface GraphqlApp {
  app: INestApplication;
  logger: RecordingLogger;
  ticker: Ticker;
  /** POSTs an operation to `/graphql`; `variables` as a string is sent as it is (JSON that `JSON.stringify` cannot write). */
  post(
    query: string,
    options?: { variables?: Record<string, unknown> | string; headers?: Record<string, string> },
  ): Promise<GraphqlResponse>;
  /** POSTs a batch of operations in one HTTP request (Apollo `allowBatchedHttpRequests`, Mercurius `allowBatchedQueries`). */
  batch(queries: string[], options?: { headers?: Record<string, string> }): Promise<GraphqlBatchResponse>;
  /** A graphql-ws client on `/graphql`, sending `headers` with its upgrade request; the caller disposes of it. */
  subscriptions(headers?: Record<string, string>): Client;
  close(): Promise<void>;
}

/** A GraphQL answer over HTTP. */
export interface GraphqlResponse {
  status: number;
  headers: Record<string, string>;
  body: { data?: Record<string, unknown> | null; errors?: GraphqlError[] };
}

/** The answer to a batch: one body per operation, in order, on one HTTP response. */
export interface GraphqlBatchResponse {
  status: number;
  headers: Record<string, string>;
  body: Array<GraphqlResponse['body']>;
}

/** One entry of a GraphQL answer's `errors`. */
export interface GraphqlError {
  message: string;
  path?: (string | number)[];
  extensions?: Record<string, unknown>;
}

/** The module options of a store: Redis on the caller's client, under a prefix of the app's own. */
export function storeOptions(store: StoreName, redis: Redis): RateLimitModuleOptions {
  return store === 'memory'
    ? { store: new MemoryStore() }
    : { store: new RedisStore({ client: redis }), prefix: `rl-e2e-graphql-${randomUUID()}:` };
}

/** Builds an app of the given driver with `RateLimitModule.forRoot(options)` and listens on a free loopback port. */
export async function startGraphqlApp(driver: DriverName, options: RateLimitModuleOptions): Promise<GraphqlApp> {
  @Module({
    imports: [RateLimitModule.forRoot(options), driver === 'apollo' ? apolloModule() : mercuriusModule()],
    providers: [Ticker, CatalogResolver, SearchResolver, BookResolver, LoginResolver],
  })
  class GraphqlAppModule {}

  const logger = new RecordingLogger();
  const moduleRef = await Test.createTestingModule({ imports: [GraphqlAppModule] }).compile();
  const app = moduleRef.createNestApplication(driver === 'apollo' ? new ExpressAdapter() : new FastifyAdapter(), {
    logger,
  });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  /** POSTs `body` (JSON) to `/graphql`: the answer's status, headers and parsed body. */
  const send = async <T>(body: string, headers: Record<string, string>) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
    });
    const text = await response.text();
    return { status: response.status, headers: Object.fromEntries(response.headers.entries()), body: parse(text) as T };
  };
  return {
    app,
    logger,
    ticker: app.get(Ticker),
    post: (query, { variables, headers = {} } = {}) =>
      send<GraphqlResponse['body']>(
        typeof variables === 'string'
          ? `{"query":${JSON.stringify(query)},"variables":${variables}}`
          : JSON.stringify({ query, variables }),
        headers,
      ),
    batch: (queries, { headers = {} } = {}) =>
      send<GraphqlBatchResponse['body']>(JSON.stringify(queries.map((query) => ({ query }))), headers),
    subscriptions: (headers = {}) =>
      createClient({
        url: `${url.replace('http', 'ws')}/graphql`,
        webSocketImpl: class extends WebSocket {
          constructor(address: string, protocols: string | string[]) {
            super(address, protocols, { headers });
          }
        },
        retryAttempts: 0,
      }),
    close: () => closeApp(app),
  };
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`not a GraphQL answer: ${text.slice(0, 200)}`);
  }
}

function apolloModule() {
  return GraphQLModule.forRoot<ApolloDriverConfig>({
    driver: ApolloDriver,
    autoSchemaFile: true,
    fieldResolverEnhancers: ['guards'],
    graphiql: false,
    allowBatchedHttpRequests: true,
    subscriptions: { 'graphql-ws': true },
    // as in development: a stack in an answer would show
    includeStacktraceInErrorResponses: true,
  });
}

function mercuriusModule() {
  return GraphQLModule.forRoot<MercuriusDriverConfig>({
    driver: MercuriusDriver,
    autoSchemaFile: true,
    fieldResolverEnhancers: ['guards'],
    graphiql: false,
    allowBatchedQueries: true,
    // queries and mutations over the socket too, as graphql-ws allows and Apollo does
    subscription: { fullWsTransport: true },
  });
}
