/**
 * The package's types as a NestJS 11 TypeScript project compiles against them (CommonJS, the
 * `tsconfig.json` beside this file: NestJS 11's starter's, so `nodenext` resolution through the
 * `require` condition, with strict on and the declarations checked):
 * test/e2e/nest11.e2e-spec.ts type-checks this file in the installed copy. It is not run.
 */
import { Controller, Get, Module } from '@nestjs/common';
import { Redis } from 'ioredis';
import {
  RateLimit,
  type RateLimitDecision,
  RateLimiterService,
  RateLimitModule,
  type RateLimitModuleOptions,
  RedisStore,
  SkipRateLimit,
} from 'nestjs-ratelimit';

const options: RateLimitModuleOptions = {
  policies: [{ name: 'app', limit: 5, window: '1m' }],
  headers: ['ietf', 'x-ratelimit'],
};

@Controller()
export class TypedController {
  constructor(private readonly limiter: RateLimiterService) {}

  @Get('burst')
  @RateLimit({ name: 'burst', rps: 0.1, burst: 2 })
  async burst(): Promise<RateLimitDecision[]> {
    return this.limiter.peek('user:1', { name: 'burst', rps: 0.1, burst: 2 });
  }

  @Get('health')
  @SkipRateLimit()
  health(): string {
    return 'ok';
  }
}

@Module({
  imports: [
    RateLimitModule.forRootAsync({
      useFactory: (): RateLimitModuleOptions => {
        const url = process.env.REDIS_URL;
        return url === undefined ? options : { ...options, store: new RedisStore({ client: new Redis(url) }) };
      },
    }),
  ],
  controllers: [TypedController],
})
export class TypedModule {}
