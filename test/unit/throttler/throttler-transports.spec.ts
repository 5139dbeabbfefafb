/**
 * The throttler guard's way to each transport, at the seams `ThrottlerModule` provides: the
 * headers of a response that has neither `header` nor `setHeader` (a response of an HTTP adapter
 * other than Express's and Fastify's, nestjs/throttler#2206) go through the app's HTTP adapter;
 * a guard made by hand, without the module, still limits HTTP; beside `RateLimitModule`, each
 * module keeps seams of its own. The transports themselves run in
 * `test/e2e/throttler-transports.e2e-spec.ts`.
 */
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { Test } from '@nestjs/testing';
import { RateLimitContexts, RateLimitModule } from '../../../lib/index.js';
import { ThrottlerGuard, ThrottlerModule, ThrottlerStorageService } from '../../../lib/throttler/index.js';
import { THROTTLER_CONTEXTS } from '../../../lib/throttler/throttler.providers.js';

class PingController {
  ping() {}
}

/** An HTTP handler's context: the request, and `response` as the adapter hands it. */
const http = (response: object) =>
  new ExecutionContextHost([{ ip: '10.0.0.1', headers: {} }, response], PingController, PingController.prototype.ping);

describe('ThrottlerGuard through its seams', () => {
  it("writes the headers of a response without header() or setHeader() through the app's HTTP adapter", async () => {
    const written: Array<[unknown, string, string]> = [];
    const adapterHost = {
      httpAdapter: { setHeader: (res: unknown, name: string, value: string) => void written.push([res, name, value]) },
    };
    const moduleRef = await Test.createTestingModule({
      imports: [ThrottlerModule.forRoot([{ ttl: 60_000, limit: 2 }])],
      providers: [ThrottlerGuard],
    })
      .overrideProvider(HttpAdapterHost)
      .useValue(adapterHost)
      .compile();
    await moduleRef.init();
    try {
      const response = { writeHead() {} };
      expect(await moduleRef.get(ThrottlerGuard).canActivate(http(response))).toBe(true);
      expect(written).toEqual([
        [response, 'X-RateLimit-Limit', '2'],
        [response, 'X-RateLimit-Remaining', '1'],
        [response, 'X-RateLimit-Reset', '60'],
      ]);
    } finally {
      await moduleRef.close();
    }
  });

  it("made by hand with NT's constructor (no module): limits HTTP, headers on the response", async () => {
    const storage = new ThrottlerStorageService();
    const guard = new ThrottlerGuard([{ ttl: 60_000, limit: 1 }], storage, new Reflector());
    await guard.onModuleInit();
    const headers = new Map<string, unknown>();
    const response = { header: (name: string, value: unknown) => void headers.set(name, value) };
    expect(await guard.canActivate(http(response))).toBe(true);
    expect(Object.fromEntries(headers)).toEqual({
      'X-RateLimit-Limit': 1,
      'X-RateLimit-Remaining': 0,
      'X-RateLimit-Reset': 60,
    });
    await expect(guard.canActivate(http(response))).rejects.toMatchObject({ status: 429 });
    expect(headers.get('Retry-After')).toBe(60);
    await storage.onApplicationShutdown();
  });

  it("beside RateLimitModule, each keeps seams of its own: RateLimitModule's contexts option stands", async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        RateLimitModule.forRoot({ contexts: ['http'], policies: [{ rps: 1, burst: 1 }] }),
        ThrottlerModule.forRoot([{ ttl: 60_000, limit: 1 }]),
      ],
    }).compile();
    await moduleRef.init();
    try {
      const native = moduleRef.get(RateLimitContexts);
      const throttler = moduleRef.get<RateLimitContexts>(THROTTLER_CONTEXTS);
      expect(throttler).not.toBe(native);
      expect(await native.load('ws')).toBeUndefined();
      expect(await throttler.load('ws')).toBeDefined();
    } finally {
      await moduleRef.close();
    }
  });
});
