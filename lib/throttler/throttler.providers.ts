import type { Provider } from '@nestjs/common';
import { RateLimitThrottlerStorage, type RateLimitThrottlerStorageOptions } from './rate-limit-throttler.storage.js';
import type { ThrottlerModuleOptions } from './throttler-module-options.interface.js';
import { ThrottlerStorage } from './throttler-storage.interface.js';
import { THROTTLER_OPTIONS } from './throttler.constants.js';

/** Injection token of the store choice `forRoot(options, engine)` was given (internal). */
export const THROTTLER_ENGINE = 'THROTTLER:ENGINE';

/** The options provider of `forRoot`. */
export function createThrottlerProviders(options: ThrottlerModuleOptions): Provider[] {
  return [{ provide: THROTTLER_OPTIONS, useValue: options }];
}

/**
 * The module's storage: the options' `storage` when given (it wins), else a
 * `RateLimitThrottlerStorage` on the store `engine` chooses (memory when none).
 */
export const ThrottlerStorageProvider: Provider = {
  provide: ThrottlerStorage,
  useFactory: (options: ThrottlerModuleOptions, engine: RateLimitThrottlerStorageOptions | null) =>
    !Array.isArray(options) && options?.storage ? options.storage : new RateLimitThrottlerStorage(engine ?? {}),
  inject: [THROTTLER_OPTIONS, THROTTLER_ENGINE],
};

/** The options' injection token. @example moduleRef.get(getOptionsToken()) */
export const getOptionsToken = (): string => THROTTLER_OPTIONS;

/** The storage's injection token. @example moduleRef.get(getStorageToken()) */
export const getStorageToken = (): symbol => ThrottlerStorage;
