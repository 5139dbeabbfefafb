import { Controller, Get, Headers, Post } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

/**
 * The partner API. The class-level policy is one bucket per API key (header x-api-key) shared by
 * every route here, so a partner's quota covers the whole API, not each route apart. A request
 * without a key falls back to its IP.
 */
@Controller('api')
@RateLimit({ name: 'api', rps: 5, burst: 20, key: 'api-key' })
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
}
