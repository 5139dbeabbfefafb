/**
 * `runAs`: Nest runs global guards before a controller's own, so the default global guard reads
 * `req.user` before a controller-level auth guard has set it. With `runAs: 'interceptor'` the
 * limiter runs after every guard: a `key: 'user'` policy buckets per user. With the default, the
 * same requests fall back to the IP (one bucket for both users here), and the module says so
 * once, naming the route. Real apps over HTTP, on both adapters, on the memory store.
 */
import { jest } from '@jest/globals';
import {
  type CanActivate,
  Controller,
  type ExecutionContext,
  Get,
  Injectable,
  Logger,
  Module,
  UseGuards,
} from '@nestjs/common';
import { RateLimit, RateLimitModule, type RateLimitModuleOptions } from '../../lib/index.js';
import { ADAPTERS, startApp, type TestApp } from '../support/app.js';

/** Sets `req.user` from `Authorization: Bearer <id>`, as an app's own auth guard would. */
@Injectable()
class BearerGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string>; user?: { id: string } }>();
    const token = /^Bearer (\w+)$/.exec(request.headers.authorization ?? '')?.[1];
    if (token !== undefined) request.user = { id: token };
    return true;
  }
}

@UseGuards(BearerGuard)
@Controller('account')
class AccountController {
  @RateLimit({ name: 'per-user', rps: 0.001, burst: 2, key: 'user' })
  @Get()
  show() {
    return { ok: true };
  }
}

describe.each(ADAPTERS)('runAs on %s, with a controller-level auth guard', (adapter) => {
  let http: TestApp | undefined;
  afterEach(async () => {
    await http?.close();
    http = undefined;
  });

  async function start(options: RateLimitModuleOptions): Promise<TestApp> {
    @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [AccountController] })
    class AppModule {}
    http = await startApp(AppModule, adapter);
    return http;
  }

  /** Statuses of `n` requests in turn as the user `id`. */
  async function statuses(app: TestApp, id: string, n: number): Promise<number[]> {
    const seen: number[] = [];
    for (let i = 0; i < n; i++) {
      const response = await app.get('/account', { authorization: `Bearer ${id}` });
      await response.arrayBuffer();
      seen.push(response.status);
    }
    return seen;
  }

  it("'interceptor': key 'user' sees the user the auth guard set, one bucket per user", async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      const app = await start({ runAs: 'interceptor' });
      expect(await statuses(app, 'alice', 3)).toEqual([200, 200, 429]);
      expect(await statuses(app, 'bob', 2)).toEqual([200, 200]);
      expect(warn).not.toHaveBeenCalled();
      // the same answer as the guard's: headers and Retry-After on the 429
      const refused = await app.get('/account', { authorization: 'Bearer alice' });
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(refused.headers.get('ratelimit')).toMatch(/^"per-user";r=0;t=\d+$/);
      expect(await refused.json()).toMatchObject({ statusCode: 429, policy: 'per-user' });
    } finally {
      warn.mockRestore();
    }
  });

  it("'guard' (the default): the users share their IP's bucket, and one warning names the route", async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      const app = await start({});
      expect(await statuses(app, 'alice', 2)).toEqual([200, 200]);
      expect(await statuses(app, 'bob', 2)).toEqual([429, 429]);
      const about = warn.mock.calls.filter(([message]) => String(message).includes("'user' key found no req.user"));
      expect(about).toHaveLength(1);
      expect(about[0][0]).toContain('A request to AccountController.show carried Authorization');
    } finally {
      warn.mockRestore();
    }
  });
});
