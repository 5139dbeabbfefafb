import { Readable } from 'node:stream';
import { Controller, type ExecutionContext, Get, Headers, Post, StreamableFile } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

/**
 * A partner's plan, as the app's own account lookup finds it from the API key (for the demo,
 * keys named pro-... and enterprise-...). Async, as a database lookup is: the module calls it
 * once per request, and a key of no known plan is on the default tier.
 */
async function planOf(context: ExecutionContext): Promise<string | undefined> {
  const apiKey = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers[
    'x-api-key'
  ];
  return /^(pro|enterprise)-/.exec(apiKey ?? '')?.[1];
}

/**
 * The partner API. The class-level policy is one bucket per API key (header x-api-key) shared by
 * every route here, so a partner's quota covers the whole API, not each route apart; its size is
 * the partner's plan. A request without a key falls back to its IP, on the free tier.
 */
@Controller('api')
@RateLimit({
  name: 'api',
  key: 'api-key',
  tier: planOf,
  tiers: {
    free: { rps: 5, burst: 20 },
    pro: { rps: 50, burst: 200 },
    enterprise: { algorithm: 'sliding_window_counter', limit: 100_000, window: '1h' },
  },
  defaultTier: 'free',
})
export class ApiController {
  @Get('orders')
  orders(@Headers('x-api-key') apiKey?: string): { apiKey: string | null; orders: unknown[] } {
    return { apiKey: apiKey ?? null, orders: [] };
  }

  /**
   * Reports vary a lot in cost, so each declares its weight in x-request-weight and takes that
   * many tokens from a budget of 100 (refilling 5 per second); an undeclared one is charged as a
   * typical report (10). The header is trusted here because partners are known; for untrusted
   * clients, compute the cost on the server with `cost: (ctx) => ...` instead.
   * The class's 'api' policy applies as well, at 1 token per request.
   */
  @Post('reports')
  @RateLimit({ name: 'reports', rps: 5, burst: 100, cost: 'header:x-request-weight', defaultCost: 10 })
  report(@Headers('x-request-weight') weight?: string): { queued: true; weight: string | null } {
    return { queued: true, weight: weight ?? null };
  }

  /**
   * Exports run on a slow backend that handles 2 a second. A leaky bucket queues a burst instead
   * of refusing it: up to 10 exports wait their turn (5 s at most) and reach the handler 2 a
   * second; an 11th at once gets 429.
   */
  @Post('exports')
  @RateLimit({ name: 'exports', algorithm: 'leaky_bucket', rps: 2, burst: 10 })
  export(): { started: true } {
    return { started: true };
  }

  /**
   * A download streams a large file for as long as the client reads it, so what it costs is how
   * many run at once, not how many start a second: at most 2 per API key in flight. The slot is
   * taken when a download starts and given back when it ends, finished or cut off by the client;
   * one held past 10 minutes (its instance died mid-stream) is reclaimed.
   */
  @Get('downloads')
  @RateLimit({ name: 'downloads', algorithm: 'concurrency', limit: 2, key: 'api-key', lease: '10m' })
  download(): StreamableFile {
    const rows = ['id,total\n', ...Array.from({ length: 1_000 }, (_, i) => `${i},${(i * 7) % 100}\n`)];
    return new StreamableFile(Readable.from(rows), { type: 'text/csv' });
  }
}
