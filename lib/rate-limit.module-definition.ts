import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { RateLimitModuleOptions } from './rate-limit-options.interface.js';

/**
 * `forRoot` / `forRootAsync` (useFactory, useClass, useExisting) from Nest's builder, so both
 * take options the same way. A class given to `useClass`/`useExisting` implements
 * `createRateLimitOptions()`. The module is global: `RateLimiterService` injects anywhere.
 */
export const {
  ConfigurableModuleClass: RateLimitConfigurableModule,
  MODULE_OPTIONS_TOKEN: RATE_LIMIT_MODULE_OPTIONS,
  ASYNC_OPTIONS_TYPE: RateLimitModuleAsyncOptions,
} = new ConfigurableModuleBuilder<RateLimitModuleOptions>()
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createRateLimitOptions')
  .setExtras({}, (definition) => ({ ...definition, global: true }))
  .build();

/** Options of `RateLimitModule.forRootAsync()`. */
export type RateLimitModuleAsyncOptions = typeof RateLimitModuleAsyncOptions;
