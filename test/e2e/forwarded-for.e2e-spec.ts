import { jest } from '@jest/globals';
import { Controller, Get, Logger, Module } from '@nestjs/common';
import { RateLimit, RateLimitModule } from '../../lib/index.js';
import { ADAPTERS, startApp, type StartOptions, type TestApp } from '../support/app.js';

@Controller('ip')
class IpController {
  @RateLimit({ name: 'per-ip', rps: 0.001, burst: 5, key: 'ip' })
  @Get()
  get() {
    return { ok: true };
  }
}

/** A fresh app (and so a fresh memory store) per test. */
async function start(adapter: (typeof ADAPTERS)[number], options: StartOptions = {}): Promise<TestApp> {
  @Module({ imports: [RateLimitModule.forRoot()], controllers: [IpController] })
  class AppModule {}
  return startApp(AppModule, adapter, options);
}

/** Statuses of one request per `X-Forwarded-For` value, sent one after another. */
async function statuses(http: TestApp, forwardedFor: readonly string[]): Promise<number[]> {
  const result: number[] = [];
  for (const value of forwardedFor) {
    const response = await http.get('/ip', { 'x-forwarded-for': value });
    await response.arrayBuffer();
    result.push(response.status);
  }
  return result;
}

const admitted = (codes: readonly number[]) => codes.filter((code) => code === 200).length;
const rotating = (n: number, last = '') =>
  Array.from({ length: n }, (_, i) => `203.0.113.${i % 256}, 10.${i}.0.1${last}`);

describe.each(ADAPTERS)('X-Forwarded-For on %s', (adapter) => {
  let warn: jest.Spied<Logger['warn']>;
  let http: TestApp | undefined;
  beforeEach(() => {
    warn = jest.spyOn(Logger.prototype, 'warn');
  });
  afterEach(async () => {
    warn.mockRestore();
    await http?.close();
    http = undefined;
  });
  const forwardedForWarnings = () =>
    warn.mock.calls.filter((call) => String(call[0]).includes('X-Forwarded-For')).length;

  it('without trust proxy, a client rotating X-Forwarded-For stays in one bucket, and one warning says so', async () => {
    http = await start(adapter);
    expect(admitted(await statuses(http, rotating(30)))).toBe(5);
    expect(forwardedForWarnings()).toBe(1);
  });

  it('with its proxy trusted, only the rightmost hop that is not the proxy counts', async () => {
    http = await start(adapter, { trustProxy: '127.0.0.1' });
    // a client writes anything to the left; the proxy appends the address it saw
    expect(admitted(await statuses(http, rotating(30, ', 198.51.100.7')))).toBe(5);
    expect(admitted(await statuses(http, ['198.51.100.8', '198.51.100.8']))).toBe(2); // another client, its own bucket
    expect(forwardedForWarnings()).toBe(0);
  });

  it('with its proxy trusted, an IPv6 /64 is one client and ::ffff:1.2.3.4 is 1.2.3.4', async () => {
    http = await start(adapter, { trustProxy: '127.0.0.1' });
    const sixtyFour = Array.from({ length: 200 }, (_, i) => `2001:db8:1:2:${i.toString(16)}::${(i * 31).toString(16)}`);
    expect(admitted(await statuses(http, sixtyFour))).toBe(5);
    expect(admitted(await statuses(http, ['2001:db8:1:3::1']))).toBe(1);
    const mapped = [
      '198.51.100.9',
      '::ffff:198.51.100.9',
      '198.51.100.9',
      '::ffff:198.51.100.9',
      '198.51.100.9',
      '::ffff:198.51.100.9',
    ];
    expect(admitted(await statuses(http, mapped))).toBe(5);
  });
});
