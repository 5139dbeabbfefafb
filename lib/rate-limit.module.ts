import { type DynamicModule, Inject, Logger, Module, type OnModuleInit } from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import { RateLimitMetrics } from './observability/rate-limit-metrics.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { RateLimitGuard } from './rate-limit.guard.js';
import { RateLimitInterceptor } from './rate-limit.interceptor.js';
import { RateLimitOutcomeInterceptor } from './rate-limit-outcome.interceptor.js';
import { invalidAsyncOptions, quotaInMemory } from './rate-limit.messages.js';
import {
  RATE_LIMIT_MODULE_OPTIONS,
  RateLimitConfigurableModule,
  type RateLimitModuleAsyncOptions,
} from './rate-limit.module-definition.js';
import { resolveOptions, type ResolvedOptions } from './rate-limit-options.js';
import type { RateLimitModuleOptions } from './rate-limit-options.interface.js';
import { RateLimiterService } from './rate-limiter.service.js';
import { RateLimiter } from './limiter/rate-limiter.js';
import { RoutePolicies } from './routes/route-policies.js';
import { resolvedObligations } from './policy/obligations.js';
import { RateLimitStore } from './stores/rate-limit-store.interface.js';
import { StoreOwner } from './stores/store-owner.js';

/**
 * Rate limiting for the whole app: validates the options and every `@RateLimit` policy at
 * start, provides `RateLimiterService` (global) and registers `RateLimitGuard` as a global guard
 * (or `RateLimitInterceptor` as a global interceptor, with `runAs: 'interceptor'`).
 * A start that fails (a bad policy) closes what the module opened, so a Redis client it created
 * does not keep the process alive.
 *
 * @example
 * @Module({ imports: [RateLimitModule.forRoot({ policies: [{ rps: 20, burst: 100 }] })] })
 * export class AppModule {}
 * @example
 * RateLimitModule.forRootAsync({
 *   inject: [ConfigService],
 *   useFactory: (config: ConfigService) => ({ redis: config.get('REDIS_URL') }),
 * })
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: RATE_LIMIT_OPTIONS,
      useFactory: (options: RateLimitModuleOptions | undefined) => resolveOptions(options),
      inject: [RATE_LIMIT_MODULE_OPTIONS],
    },
    {
      provide: StoreOwner,
      // after RATE_LIMIT_OPTIONS, which has checked `store` and `redis`
      useFactory: (options: RateLimitModuleOptions) => StoreOwner.open({ store: options.store, redis: options.redis }),
      inject: [RATE_LIMIT_MODULE_OPTIONS, RATE_LIMIT_OPTIONS],
    },
    {
      provide: RateLimitStore,
      useFactory: (owner: StoreOwner) => owner.store,
      inject: [StoreOwner],
    },
    {
      provide: RateLimitMetrics,
      // @opentelemetry/api is an optional peer: imported here, once, at start (null: no metrics)
      useFactory: ({ metrics }: ResolvedOptions) => (metrics ? RateLimitMetrics.load() : null),
      inject: [RATE_LIMIT_OPTIONS],
    },
    RoutePolicies,
    RateLimiter,
    RateLimiterService,
    RateLimitContexts,
    RateLimitGuard,
    RateLimitInterceptor,
    RateLimitOutcomeInterceptor,
    {
      provide: APP_GUARD,
      // nothing (Nest skips a global enhancer whose factory gives none) unless registered as the guard
      useFactory: ({ guard, runAs }: ResolvedOptions, rateLimit: RateLimitGuard) =>
        guard && runAs === 'guard' ? rateLimit : null,
      inject: [RATE_LIMIT_OPTIONS, RateLimitGuard],
    },
    {
      // likewise: an interceptor that only passed requests on would still cost every request its turn
      provide: APP_INTERCEPTOR,
      useFactory: ({ guard, runAs }: ResolvedOptions, rateLimit: RateLimitInterceptor) =>
        guard && runAs === 'interceptor' ? rateLimit : null,
      inject: [RATE_LIMIT_OPTIONS, RateLimitInterceptor],
    },
    {
      // the ends of requests under module policies that owe something then (count: 'failures',
      // adaptive, the slots of concurrency), on every route; RateLimitInterceptor hears them itself
      provide: APP_INTERCEPTOR,
      useFactory: ({ guard, runAs, policies }: ResolvedOptions, outcomes: RateLimitOutcomeInterceptor) =>
        policies.some((policy) => resolvedObligations(policy).atEnd) && !(guard && runAs === 'interceptor')
          ? outcomes
          : null,
      inject: [RATE_LIMIT_OPTIONS, RateLimitOutcomeInterceptor],
    },
  ],
  exports: [
    RateLimiterService,
    RateLimitGuard,
    RateLimitInterceptor,
    RateLimitOutcomeInterceptor,
    RateLimiter,
    RateLimitStore,
    RATE_LIMIT_OPTIONS,
    RoutePolicies,
    RateLimitContexts,
  ],
})
export class RateLimitModule extends RateLimitConfigurableModule implements OnModuleInit {
  private readonly logger = new Logger('RateLimitModule');

  constructor(
    private readonly routes: RoutePolicies,
    private readonly owner: StoreOwner,
    @Inject(RateLimitStore) private readonly store: RateLimitStore,
  ) {
    super();
  }

  /**
   * Reads every controller's policies, so a bad one fails start naming it; waits for the store to
   * be set to decide (see `RateLimitStore.ready`: a Redis that refuses scripts fails start); warns
   * once when a quota counts in this process's memory, where it does not outlive a restart.
   */
  async onModuleInit(): Promise<void> {
    try {
      this.routes.compileAll();
      await this.store.ready?.();
    } catch (error) {
      await this.owner.close();
      throw error;
    }
    if (this.store.kind !== 'memory') return;
    const quotas = new Set<string>();
    for (const policy of this.routes.all()) if (policy.owes.period) quotas.add(policy.name);
    if (quotas.size > 0) this.logger.warn(quotaInMemory([...quotas]));
  }

  /** Rate limiting with these options (all optional: a memory store and no module policy). */
  static override forRoot(options: RateLimitModuleOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  /** Options from a factory, a class or an existing provider (`createRateLimitOptions()`). */
  static override forRootAsync(options: RateLimitModuleAsyncOptions): DynamicModule {
    checkAsyncOptions(options);
    return super.forRootAsync(options);
  }
}

/**
 * Checks how `forRootAsync` is to make the options, when the module is declared: without it, a
 * missing or mistyped factory surfaces at start as a dependency Nest cannot resolve, naming none
 * of these. What the factory returns is checked at start like `forRoot`'s options.
 */
function checkAsyncOptions(options: RateLimitModuleAsyncOptions): void {
  const fail = (problem: string): never => {
    throw new Error(invalidAsyncOptions(problem, options));
  };
  if (typeof options !== 'object' || options === null)
    fail('they must be an object such as { useFactory: () => ({}) }');
  const ways = (['useFactory', 'useClass', 'useExisting'] as const).filter((way) => options[way] !== undefined);
  if (ways.length !== 1) {
    fail(
      'give one of "useFactory" (a function returning the options), "useClass" or "useExisting" (a provider with createRateLimitOptions())',
    );
  }
  if (options.useFactory !== undefined && typeof options.useFactory !== 'function') {
    fail('"useFactory" must be a function returning the options');
  }
  if (options.useClass !== undefined && typeof options.useClass !== 'function') {
    fail('"useClass" must be a class with createRateLimitOptions()');
  }
  if (options.inject !== undefined && !Array.isArray(options.inject))
    fail('"inject" must be a list of what useFactory takes');
}
