import type { Provider } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { RateLimitThrottlerStorage, type RateLimitThrottlerStorageOptions } from './rate-limit-throttler.storage.js';
import type { ThrottlerModuleOptions } from './throttler-module-options.interface.js';
import { ThrottlerStorage } from './throttler-storage.interface.js';
import { throttlerContexts } from './throttler-transports.js';
import { THROTTLER_OPTIONS } from './throttler.constants.js';

/** Injection token of the store choice `forRoot(options, engine)` was given (internal). */
export const THROTTLER_ENGINE = 'THROTTLER:ENGINE';

/** Injection token of the throttler guard's seams, a `RateLimitContexts` of its own (internal). */
export const THROTTLER_CONTEXTS = 'THROTTLER:CONTEXTS';

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

/**
 * The throttler guard's seams, one per kind of context (see `throttlerContexts`): under a token
 * of their own, so that beside `RateLimitModule` each module's guard keeps its own.
 */
export const ThrottlerContextsProvider: Provider = {
  provide: THROTTLER_CONTEXTS,
  useFactory: throttlerContexts,
  inject: [HttpAdapterHost],
};

/** The options' injection token. @example moduleRef.get(getOptionsToken()) */
export const getOptionsToken = (): string => THROTTLER_OPTIONS;

/** The storage's injection token. @example moduleRef.get(getStorageToken()) */
export const getStorageToken = (): symbol => ThrottlerStorage;
