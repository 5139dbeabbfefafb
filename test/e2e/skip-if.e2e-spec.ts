import { randomUUID } from 'node:crypto';
import { expect } from '@jest/globals';
import { Controller, Get, Module } from '@nestjs/common';
import { SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import {
  type LimitedRequest,
  MemoryStore,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  type SkipIf,
} from '../../lib/index.js';
import { ADAPTERS, startApp, type TestApp } from '../support/app.js';
import { GATEWAY_ADAPTERS, type GatewayApp, startGatewayApp } from '../support/gateway-apps.js';
import { DRIVERS, type GraphqlApp, startGraphqlApp } from '../support/graphql-apps.js';

/**
 * `skipIf(ctx, request)` in every context: a module's or a policy's `skipIf` reads the request as
 * the key sources do (`request.headers`, `request.ip`, `request.user`), so the README's examples
 * work alike on HTTP routes, GraphQL fields and gateway messages, and never throw where the
 * transport keeps no headers (ws: `headers` is `{}`). Real servers and clients.
 */

const TOKEN = 'internal-secret';

/** The README's example: internal traffic, told by a header, passes uncharged. */
const internal: SkipIf = (_ctx, request) => request.headers['x-internal-token'] === TOKEN;

/** One request an hour per client (the default key chain: the API key here, else the IP). */
const GLOBAL: RateLimitPolicy = { name: 'global', limit: 1, window: '1h' };

/** Where the `skipIf` goes: on the module (every policy skipped) or on the policy itself. */
const LEVELS = ['module', 'policy'] as const;
type Level = (typeof LEVELS)[number];

/** The module options with `GLOBAL` and the README's `skipIf` at `level`; what each `skipIf` was given goes to `seen`. */
function optionsAt(level: Level, seen: LimitedRequest[]): RateLimitModuleOptions {
  const watched: SkipIf = (ctx, request) => (seen.push(request), internal(ctx, request));
  return level === 'module'
    ? { store: new MemoryStore(), policies: [GLOBAL], skipIf: watched }
    : { store: new MemoryStore(), policies: [{ ...GLOBAL, skipIf: watched }] };
}

@Controller('things')
class ThingsController {
  @Get()
  list() {
    return [];
  }
}

describe.each(ADAPTERS.flatMap((adapter) => LEVELS.map((level) => [adapter, level] as const)))(
  'skipIf on HTTP, %s, on the %s',
  (adapter, level) => {
    const seen: LimitedRequest[] = [];
    let http: TestApp;
    beforeAll(async () => {
      @Module({ imports: [RateLimitModule.forRoot(optionsAt(level, seen))], controllers: [ThingsController] })
      class AppModule {}
      http = await startApp(AppModule, adapter);
    });
    afterAll(() => http.close());

    it('is given the request: internal traffic passes uncharged, any other is limited', async () => {
      const apiKey = randomUUID();
      const asInternal = { 'x-api-key': apiKey, 'x-internal-token': TOKEN };
      for (let i = 0; i < 3; i++) {
        const response = await http.get('/things', asInternal);
        expect(response.status).toBe(200);
        expect(response.headers.get('ratelimit-policy')).toBeNull();
      }
      expect((await http.get('/things', { 'x-api-key': apiKey })).status).toBe(200);
      expect((await http.get('/things', { 'x-api-key': apiKey })).status).toBe(429);
      expect(seen.at(-1)).toMatchObject({ ip: '127.0.0.1', headers: expect.objectContaining({ 'x-api-key': apiKey }) });
    });
  },
);

describe.each(DRIVERS.flatMap((driver) => LEVELS.map((level) => [driver, level] as const)))(
  'skipIf on GraphQL, %s, on the %s',
  (driver, level) => {
    const seen: LimitedRequest[] = [];
    let graphql: GraphqlApp;
    beforeAll(async () => {
      graphql = await startGraphqlApp(driver, optionsAt(level, seen));
    });
    afterAll(() => graphql.close());

    it("reads the operation's HTTP request: internal traffic passes uncharged, any other is limited", async () => {
      const apiKey = randomUUID();
      // `books` is under the resolver's own policy too (`catalog`, 2 at most): a skipped module
      // skipIf skips it as well; a policy's skips only `global`
      const internalRuns = level === 'module' ? 3 : 2;
      for (let i = 0; i < internalRuns; i++) {
        const answer = await graphql.post('{ books }', { headers: { 'x-api-key': apiKey, 'x-internal-token': TOKEN } });
        expect(answer.body).toEqual({ data: { books: 'books' } });
        expect(answer.headers['ratelimit-policy'] ?? '').not.toContain('"global"');
      }
      const other = randomUUID();
      expect((await graphql.post('{ books }', { headers: { 'x-api-key': other } })).body).toEqual({
        data: { books: 'books' },
      });
      const refused = await graphql.post('{ books }', { headers: { 'x-api-key': other } });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ extensions: expect.objectContaining({ code: 'RATE_LIMITED', policy: 'global' }) }),
      ]);
      expect(seen.at(-1)).toMatchObject({
        ip: expect.stringContaining('127.0.0.1'),
        headers: expect.objectContaining({ 'x-api-key': other }),
      });
      expect(graphql.logger.errors).toEqual([]);
    });
  },
);

@WebSocketGateway()
class EchoGateway {
  @SubscribeMessage('echo')
  echo() {
    return { event: 'echo', data: 'hi' };
  }
}

describe.each(GATEWAY_ADAPTERS.flatMap((adapter) => LEVELS.map((level) => [adapter, level] as const)))(
  'skipIf on a gateway, %s, on the %s',
  (adapter, level) => {
    const seen: LimitedRequest[] = [];
    let gateway: GatewayApp;
    beforeEach(async () => {
      seen.length = 0;
      @Module({ imports: [RateLimitModule.forRoot(optionsAt(level, seen))], providers: [EchoGateway] })
      class AppModule {}
      gateway = await startGatewayApp(AppModule, adapter);
    });
    afterEach(() => gateway.close());

    const echoed = { event: 'echo', data: 'hi' };
    const refused = { event: 'exception', data: expect.objectContaining({ statusCode: 429, policy: 'global' }) };

    it('reads the connection: internal traffic passes uncharged where the handshake has headers (socket.io), none throws where it has none (ws)', async () => {
      const client = await gateway.connect({ headers: { 'x-internal-token': TOKEN } });
      if (adapter === 'socket.io') {
        for (let i = 0; i < 3; i++) expect(await client.ask('echo')).toEqual(echoed);
      } else {
        // ws keeps no headers of the upgrade request: `headers` is {}, so nothing is skipped
        expect(await client.ask('echo')).toEqual(echoed);
        expect(await client.ask('echo')).toEqual(refused);
      }
      expect(seen.at(-1)).toMatchObject({
        ip: expect.stringContaining('127.0.0.1'),
        headers: adapter === 'ws' ? {} : expect.objectContaining({ 'x-internal-token': TOKEN }),
      });
      expect(gateway.logged.error).toEqual([]);
    });

    it('limits the other clients', async () => {
      const client = await gateway.connect();
      expect(await client.ask('echo')).toEqual(echoed);
      expect(await client.ask('echo')).toEqual(refused);
      expect(client.open).toBe(true);
    });
  },
);
