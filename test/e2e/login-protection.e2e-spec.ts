import { randomUUID } from 'node:crypto';
import { Controller, type ExecutionContext, Get, Module, Query, UnauthorizedException } from '@nestjs/common';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { MessageBody, SubscribeMessage, WebSocketGateway, WsException } from '@nestjs/websockets';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { limitExceeded } from '../../lib/rate-limit.messages.js';
import { CASE_EPOCH } from '../cases/cases.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import { GATEWAY_ADAPTERS, type GatewayApp, startGatewayApp } from '../support/gateway-apps.js';
import { DRIVERS, type GraphqlApp, startGraphqlApp } from '../support/graphql-apps.js';
import { startMicroservice, type TestMicroservice } from '../support/microservice-apps.js';
import { useTestRedis } from '../support/redis/test-redis.js';

/**
 * Per-client limits around the guard, on both stores and both HTTP adapters: `count: 'failures'`
 * (failed logins), `skipIf` on a policy and on the module, and `retryAfterJitter`; and failures
 * counted on a TCP microservice.
 */

/** A pinned clock: nothing refills during a test, and every refusal's exact wait is known. */
const T0 = CASE_EPOCH;

/** A request header, as a `skipIf` predicate reads it. */
const header = (context: ExecutionContext, name: string) =>
  context.switchToHttp().getRequest<{ headers: Record<string, string | string[] | undefined> }>().headers[name];
const isTrusted = (context: ExecutionContext) => header(context, 'x-trusted') === 'yes';
const isInternal = (context: ExecutionContext) => header(context, 'x-internal') === 'yes';

@Controller('auth')
class AuthController {
  /** Succeeds with the right password; else 401, which an exception filter sets after the handler threw. */
  @RateLimit({ name: 'login', limit: 5, window: '15m', key: 'header:x-client', count: 'failures' })
  @Get('login')
  login(@Query('password') password: string) {
    if (password !== 'right') throw new UnauthorizedException('wrong password');
    return { ok: true };
  }

  /** The README's login protection: failures counted, and a block of an hour once they reach the limit. */
  @RateLimit({
    name: 'guarded-login',
    limit: 5,
    window: '15m',
    key: 'header:x-client',
    count: 'failures',
    blockFor: '1h',
  })
  @Get('guarded-login')
  guardedLogin(@Query('password') password: string) {
    return this.login(password);
  }

  /** One request per 10 s per client: every refusal waits exactly 10 s before jitter. */
  @RateLimit({ name: 'slow', rps: 0.1, burst: 1, key: 'header:x-client' })
  @Get('slow')
  slow() {
    return { ok: true };
  }

  @RateLimit({
    name: 'allow-listed',
    rps: 0.001,
    burst: 1,
    key: 'header:x-client',
    skipIf: async (context) => isTrusted(context),
  })
  @Get('allow-listed')
  allowListed() {
    return { ok: true };
  }
}

const redis = useTestRedis();

const STORES: Record<'memory' | 'redis', () => { store: RateLimitStore; prefix?: string }> = {
  memory: () => ({ store: new MemoryStore({ clock: () => T0 }) }),
  redis: () => ({
    store: new RedisStore({ client: redis(), clock: () => T0 }),
    prefix: `rl-e2e-login-${randomUUID()}:`,
  }),
};

const CASES = (['memory', 'redis'] as const).flatMap((store) => ADAPTERS.map((adapter) => [store, adapter] as const));

describe.each(CASES)('login protection on the %s store, %s', (storeName, adapter) => {
  const apps: TestApp[] = [];
  afterAll(() => Promise.all(apps.map((app) => app.close())));

  async function start(options: RateLimitModuleOptions = {}): Promise<TestApp> {
    @Module({
      imports: [RateLimitModule.forRoot({ ...STORES[storeName](), ...options })],
      controllers: [AuthController],
    })
    class AppModule {}
    const app = await startApp(AppModule, adapter);
    apps.push(app);
    return app;
  }

  const client = () => ({ 'x-client': randomUUID() });
  const statuses = (responses: Response[]) => responses.map((response) => response.status);

  it('never refuses successful logins, and refuses once 5 failed ones are counted', async () => {
    const http = await start();
    const headers = client();
    const login = (password: string) => http.get(`/auth/login?password=${password}`, headers);
    const seen: number[] = [];
    for (let i = 0; i < 10; i++) {
      seen.push((await login('right')).status);
      if (i % 2 === 1) seen.push((await login('wrong')).status);
    }
    expect(seen).toEqual([200, 200, 401, 200, 200, 401, 200, 200, 401, 200, 200, 401, 200, 200, 401]);
    const refused = await read(await login('wrong'));
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ statusCode: 429, policy: 'login' });
    // the right password too, now: the client is out of attempts until the window ends
    expect((await login('right')).status).toBe(429);
  });

  it.each([
    ['a module policy, with the guard', { runAs: 'guard' }],
    ['a module policy, with runAs: interceptor', { runAs: 'interceptor' }],
  ] as const)('counts only failures under %s', async (_what, { runAs }) => {
    const http = await start({
      runAs,
      policies: [{ name: 'sign-in', limit: 2, window: '15m', key: 'header:x-client', count: 'failures' }],
    });
    const headers = client();
    const login = async (password: string) => (await http.get(`/auth/login?password=${password}`, headers)).status;
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) seen.push(await login('right'));
    seen.push(await login('wrong'), await login('right'), await login('wrong'), await login('right'));
    expect(seen).toEqual([200, 200, 200, 200, 401, 200, 401, 429]);
  });

  it('blocks a client for an hour once its failures reach the limit, its successes never counted (with blockFor)', async () => {
    const http = await start();
    const headers = client();
    const login = (password: string) => http.get(`/auth/guarded-login?password=${password}`, headers);
    const seen: number[] = [];
    for (let i = 0; i < 6; i++) seen.push((await login('right')).status);
    for (let i = 0; i < 5; i++) seen.push((await login('wrong')).status);
    expect(seen).toEqual([200, 200, 200, 200, 200, 200, 401, 401, 401, 401, 401]);
    const blocked = await read(await login('right'));
    expect(blocked.status).toBe(429);
    expect(blocked.headers['retry-after']).toBe('3600');
  });

  it('admits at most 5 of 20 concurrent failed attempts at limit 5', async () => {
    const http = await start();
    const headers = client();
    const responses = await Promise.all(
      Array.from({ length: 20 }, () => http.get('/auth/login?password=wrong', headers)),
    );
    const counted = statuses(responses);
    expect(counted.filter((status) => status === 401).length).toBe(5);
    expect(counted.filter((status) => status === 429).length).toBe(15);
  });

  it('spreads Retry-After over [W, ceil(1.5 W)] across identities with jitter 0.5, the same for one identity', async () => {
    const http = await start({ retryAfterJitter: 0.5 });
    const waits: number[] = [];
    for (let i = 0; i < 30; i++) {
      const headers = { 'x-client': `client-${i}` };
      expect((await http.get('/auth/slow', headers)).status).toBe(200);
      const first = await read(await http.get('/auth/slow', headers));
      const body = first.body as { retryAfter: number; message: string };
      const again = await read(await http.get('/auth/slow', headers));
      expect(first.status).toBe(429);
      const wait = Number(first.headers['retry-after']);
      expect(body.retryAfter).toBe(wait);
      expect(body.message).toBe(limitExceeded('slow', wait));
      expect(again.headers['retry-after']).toBe(String(wait));
      waits.push(wait);
    }
    for (const wait of waits) expect(wait >= 10 && wait <= 15).toBe(true);
    expect(new Set(waits).size).toBeGreaterThanOrEqual(3);
  });

  it("lets a request pass uncharged when a policy's skipIf says so", async () => {
    const http = await start();
    const headers = client();
    for (let i = 0; i < 3; i++) {
      const trusted = await read(await http.get('/auth/allow-listed', { ...headers, 'x-trusted': 'yes' }));
      expect(trusted.status).toBe(200);
      expect(trusted.headers['ratelimit-policy']).toBeUndefined();
    }
    expect((await http.get('/auth/allow-listed', headers)).status).toBe(200);
    expect((await http.get('/auth/allow-listed', headers)).status).toBe(429);
    expect((await http.get('/auth/allow-listed', { ...headers, 'x-trusted': 'yes' })).status).toBe(200);
  });

  it("lets a request pass every policy uncharged when the module's skipIf says so", async () => {
    const http = await start({
      skipIf: isInternal,
      policies: [{ name: 'global', rps: 0.001, burst: 2, key: 'header:x-client' }],
    });
    const headers = client();
    for (let i = 0; i < 3; i++)
      expect((await http.get('/auth/slow', { ...headers, 'x-internal': 'yes' })).status).toBe(200);
    expect((await http.get('/auth/slow', headers)).status).toBe(200);
    expect((await http.get('/auth/slow', headers)).status).toBe(429);
  });
});

/** Failed logins over TCP: the handler's error is the failure. */
@Controller()
class RpcAuthController {
  @RateLimit({
    name: 'rpc-login',
    limit: 2,
    window: '15m',
    count: 'failures',
    key: (context) => context.switchToRpc().getData<{ user?: string } | undefined>()?.user,
  })
  @MessagePattern('login')
  login(@Payload() data: { user: string; password: string }) {
    if (data.password !== 'right') throw new RpcException({ status: 'error', message: 'wrong password' });
    return 'welcome';
  }
}

describe.each(['memory', 'redis'] as const)("count: 'failures' on a TCP microservice, %s store", (storeName) => {
  let service: TestMicroservice;
  afterEach(() => service.close());

  // a token bucket of 2 per 15 min: one attempt comes back every 450 s
  it('gives back the charge of a message whose handler succeeds, and refuses once 2 failed', async () => {
    @Module({ imports: [RateLimitModule.forRoot(STORES[storeName]())], controllers: [RpcAuthController] })
    class MicroserviceModule {}
    service = await startMicroservice(MicroserviceModule);
    const user = randomUUID();
    const login = (password: string) =>
      service.send('login', { user, password }).catch((error: { message: string }) => error.message);
    const answers: unknown[] = [];
    for (let i = 0; i < 5; i++) answers.push(await login('right'));
    answers.push(
      await login('wrong'),
      await login('right'),
      await login('wrong'),
      await login('right'),
      await login('wrong'),
    );
    expect(answers).toEqual([
      ...Array<string>(5).fill('welcome'),
      'wrong password',
      'welcome',
      'wrong password',
      limitExceeded('rpc-login', 450),
      limitExceeded('rpc-login', 450),
    ]);
  });
});

/** Failed logins over a WebSocket: the handler's `WsException` is the failure. */
@WebSocketGateway()
class LoginGateway {
  @RateLimit({ name: 'ws-login', limit: 2, window: '15m', key: 'ip', count: 'failures' })
  @SubscribeMessage('login')
  login(@MessageBody() data: { password: string }) {
    if (data.password !== 'right') throw new WsException('wrong password');
    return { event: 'welcome', data: {} };
  }
}

describe.each(GATEWAY_ADAPTERS)("count: 'failures' on a gateway, %s", (adapter) => {
  let gateway: GatewayApp;
  afterEach(() => gateway.close());

  it('gives back the charge of a message whose handler succeeds, and refuses once 2 failed', async () => {
    @Module({
      imports: [RateLimitModule.forRoot({ store: new MemoryStore({ clock: () => T0 }) })],
      providers: [LoginGateway],
    })
    class GatewayModule {}
    gateway = await startGatewayApp(GatewayModule, adapter);
    const client = await gateway.connect();
    const login = async (password: string) => {
      const answer = await client.ask('login', { password });
      const error = answer.data as { statusCode?: number; message?: string };
      return answer.event === 'welcome' ? 'welcome' : error.statusCode === 429 ? 429 : error.message;
    };
    const answers: unknown[] = [];
    for (let i = 0; i < 4; i++) answers.push(await login('right'));
    for (const password of ['wrong', 'right', 'wrong', 'right']) answers.push(await login(password));
    expect(answers).toEqual([
      'welcome',
      'welcome',
      'welcome',
      'welcome',
      'wrong password',
      'welcome',
      'wrong password',
      429,
    ]);
  });
});

describe("a route counting failures, in an app without RateLimitModule (a controller's own test)", () => {
  it('starts and answers: the outcome interceptor @RateLimit adds has nothing to settle', async () => {
    @Module({ controllers: [AuthController] })
    class BareModule {}
    const http = await startApp(BareModule, 'express');
    try {
      expect((await http.get('/auth/login?password=right')).status).toBe(200);
      expect((await http.get('/auth/login?password=wrong')).status).toBe(401);
    } finally {
      await http.close();
    }
  });
});

describe.each(DRIVERS)("count: 'failures' on GraphQL, %s", (driver) => {
  let gql: GraphqlApp;
  afterEach(() => gql.close());

  it('gives back the charge of an operation whose field resolves, and refuses once 2 failed', async () => {
    gql = await startGraphqlApp(driver, { store: new MemoryStore({ clock: () => T0 }) });
    const headers = { 'x-client': randomUUID() };
    const login = async (password: string) => {
      const { body } = await gql.post('query($password: String!) { login(password: $password) }', {
        variables: { password },
        headers,
      });
      return (
        body.data?.login ??
        (body.errors![0].extensions?.code === 'RATE_LIMITED' ? 'RATE_LIMITED' : body.errors![0].message)
      );
    };
    const answers: unknown[] = [];
    for (const password of ['right', 'right', 'right', 'wrong', 'right', 'wrong', 'right'])
      answers.push(await login(password));
    expect(answers).toEqual([
      'welcome',
      'welcome',
      'welcome',
      'wrong password',
      'welcome',
      'wrong password',
      'RATE_LIMITED',
    ]);
  });
});

describe.each((['memory', 'redis'] as const).flatMap((store) => DRIVERS.map((driver) => [driver, store] as const)))(
  "count: 'failures' and blockFor under aliases, GraphQL on %s, %s store",
  (driver, storeName) => {
    let gql: GraphqlApp;
    beforeAll(async () => {
      gql = await startGraphqlApp(driver, STORES[storeName]());
    });
    afterAll(() => gql.close());

    /** A mutation of `passwords.length` aliased `signIn` fields (limit 3 failures, then an hour's block), as GraphQL runs them: one after another. */
    async function signIns(passwords: string[], headers: Record<string, string>) {
      const fields = passwords.map((password, i) => `a${i}: signIn(password: "${password}")`).join(' ');
      const answer = await gql.post(`mutation { ${fields} }`, { headers });
      const outcomes = passwords.map((_, i) => {
        const error = answer.body.errors?.find(({ path }) => path?.[0] === `a${i}`);
        return error === undefined
          ? answer.body.data?.[`a${i}`]
          : error.extensions?.code === 'RATE_LIMITED'
            ? error.extensions.retryAfter
            : error.message;
      });
      return { outcomes, headers: answer.headers };
    }

    it('counts each aliased failure: 3 wrong passwords reach the resolver, then the client is blocked for the hour', async () => {
      const headers = { 'x-client': randomUUID() };
      const first = await signIns(
        Array.from({ length: 100 }, (_, i) => `guess-${i}`),
        headers,
      );
      expect(first.outcomes.slice(0, 4)).toEqual(['wrong password', 'wrong password', 'wrong password', 3600]);
      expect(first.outcomes.slice(4).every((outcome) => outcome === 3600)).toBe(true);
      expect(first.headers['retry-after']).toBe('3600');
      // blocked: the next request, even with the right password
      const next = await signIns(['right', 'guess'], headers);
      expect(next.outcomes).toEqual([3600, 3600]);
    });

    it('counts the failures of the aliases after one that succeeds', async () => {
      const headers = { 'x-client': randomUUID() };
      const { outcomes } = await signIns(['right', ...Array.from({ length: 100 }, (_, i) => `guess-${i}`)], headers);
      expect(outcomes[0]).toBe('welcome');
      // 3, once the success has given its charge back; 2 if a store took the next alias's charge first
      const wrong = outcomes.filter((outcome) => outcome === 'wrong password').length;
      expect(wrong).toBeGreaterThanOrEqual(2);
      expect(wrong).toBeLessThanOrEqual(3);
      expect((await signIns(['guess'], headers)).outcomes).toEqual([3600]);
    });
  },
);
