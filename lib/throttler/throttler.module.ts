import { type DynamicModule, Global, Module, type Provider } from '@nestjs/common';
import { throttlerAsyncOptionsMissing } from '../rate-limit.messages.js';
import type { RateLimitThrottlerStorageOptions } from './rate-limit-throttler.storage.js';
import type {
  ThrottlerAsyncOptions,
  ThrottlerModuleOptions,
  ThrottlerOptionsFactory,
} from './throttler-module-options.interface.js';
import { THROTTLER_OPTIONS } from './throttler.constants.js';
import {
  createThrottlerProviders,
  THROTTLER_ENGINE,
  ThrottlerContextsProvider,
  ThrottlerStorageProvider,
} from './throttler.providers.js';

/**
 * @nestjs/throttler's module on our engine: global, it provides the options
 * (`getOptionsToken()`), the storage (`getStorageToken()`) and the guard's transport seams; the
 * app registers the guard (`{ provide: APP_GUARD, useClass: ThrottlerGuard }`) or uses
 * `@UseGuards(ThrottlerGuard)`.
 *
 * `engine` chooses our store when the options give no `storage`: `{ redis }` (an ioredis client
 * the app closes, or a URL or options whose client the module closes on shutdown), `{ store }`,
 * a key `prefix`, `failMode` and `timeout` (see `RateLimitThrottlerStorageOptions`). Without it:
 * a bounded memory store.
 *
 * @example ThrottlerModule.forRoot([{ ttl: 60_000, limit: 10 }], { redis: 'redis://localhost:6379' })
 */
@Global()
@Module({})
export class ThrottlerModule {
  /** The module with `options` (an array of throttlers, or an object with `throttlers`). */
  static forRoot(options: ThrottlerModuleOptions = [], engine?: RateLimitThrottlerStorageOptions): DynamicModule {
    const providers = [...createThrottlerProviders(options), ...storageAndSeams(engine)];
    return { module: ThrottlerModule, providers, exports: providers };
  }

  /**
   * The module with options made at start: `useFactory` (with `inject`), `useClass` or
   * `useExisting` (a `ThrottlerOptionsFactory`).
   *
   * @example ThrottlerModule.forRootAsync({ imports: [ConfigModule], inject: [ConfigService], useFactory: (c: ConfigService) => [{ ttl: c.get('TTL'), limit: 10 }] })
   */
  static forRootAsync(options: ThrottlerAsyncOptions, engine?: RateLimitThrottlerStorageOptions): DynamicModule {
    const providers = [...asyncProviders(options), ...storageAndSeams(engine)];
    return { module: ThrottlerModule, imports: options.imports ?? [], providers, exports: providers };
  }
}

/**
 * What both forms provide beside the options: the store choice (`null` when none: Nest takes an
 * `undefined` value for no value), the storage made on it, and the guard's transport seams.
 */
function storageAndSeams(engine: RateLimitThrottlerStorageOptions | undefined): Provider[] {
  return [{ provide: THROTTLER_ENGINE, useValue: engine ?? null }, ThrottlerStorageProvider, ThrottlerContextsProvider];
}

/** The options provider of `forRootAsync`, and the factory class it makes (`useClass`). */
function asyncProviders(options: ThrottlerAsyncOptions): Provider[] {
  if (options.useFactory) {
    return [{ provide: THROTTLER_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] }];
  }
  const factory = options.useExisting ?? options.useClass;
  if (factory === undefined) {
    throw new Error(throttlerAsyncOptionsMissing);
  }
  const fromFactory: Provider = {
    provide: THROTTLER_OPTIONS,
    useFactory: (made: ThrottlerOptionsFactory) => made.createThrottlerOptions(),
    inject: [factory],
  };
  return options.useExisting ? [fromFactory] : [fromFactory, { provide: factory, useClass: factory }];
}
