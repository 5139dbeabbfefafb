import { type DynamicModule, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { RateLimitModule } from '../rate-limit.module.js';
import type { RateLimitModuleOptions } from '../rate-limit-options.interface.js';
import { MemoryStore } from '../stores/memory/memory.store.js';
import { ManualClock } from './manual-clock.js';

/** The memory store the testing module made: its own to close. */
const TESTING_STORE = Symbol('RATE_LIMIT:TESTING_STORE');

/** Options of `RateLimitTestingModule.forRoot()`: the module's, but the store, which is the kit's. */
export type RateLimitTestingOptions = Omit<RateLimitModuleOptions, 'store' | 'redis'>;

/**
 * `RateLimitModule` for an app's tests: the same guard, policies and headers, on a `MemoryStore`
 * driven by a `ManualClock` that the tests move (`moduleRef.get(ManualClock)`), so a test that
 * waits out a refusal advances the clock instead of sleeping. Empty the buckets between tests
 * with `RateLimiterService.resetAll()`. Global, like `RateLimitModule`: `ManualClock` injects
 * anywhere. The store is closed on shutdown.
 *
 * @example
 * const moduleRef = await Test.createTestingModule({
 *   imports: [RateLimitTestingModule.forRoot()],
 *   controllers: [CatsController],
 * }).compile();
 * const clock = moduleRef.get(ManualClock);
 * beforeEach(() => moduleRef.get(RateLimiterService).resetAll());
 */
@Module({})
export class RateLimitTestingModule implements OnApplicationShutdown {
  constructor(@Inject(TESTING_STORE) private readonly store: MemoryStore) {}

  /** `RateLimitModule.forRoot(options)` on a memory store whose clock is a `ManualClock` (starting now). */
  static forRoot(options: RateLimitTestingOptions = {}): DynamicModule {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    return {
      module: RateLimitTestingModule,
      global: true,
      imports: [RateLimitModule.forRoot({ ...options, store })],
      providers: [
        { provide: ManualClock, useValue: clock },
        { provide: TESTING_STORE, useValue: store },
      ],
      exports: [ManualClock],
    };
  }

  onApplicationShutdown(): Promise<void> {
    return this.store.close();
  }
}
