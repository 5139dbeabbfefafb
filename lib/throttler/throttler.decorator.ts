import { Inject } from '@nestjs/common';
import type {
  Resolvable,
  ThrottlerGenerateKeyFunction,
  ThrottlerGetTrackerFunction,
} from './throttler-module-options.interface.js';
import {
  THROTTLER_BLOCK_DURATION,
  THROTTLER_KEY_GENERATOR,
  THROTTLER_LIMIT,
  THROTTLER_SKIP,
  THROTTLER_TRACKER,
  THROTTLER_TTL,
} from './throttler.constants.js';
import { getOptionsToken, getStorageToken } from './throttler.providers.js';

/** What `@Throttle` may override of one throttler; each field is read handler first, then class. */
interface ThrottlerMethodOrControllerOptions {
  limit?: Resolvable<number>;
  /** Milliseconds. */
  ttl?: Resolvable<number>;
  /** Milliseconds. */
  blockDuration?: Resolvable<number>;
  getTracker?: ThrottlerGetTrackerFunction;
  generateKey?: ThrottlerGenerateKeyFunction;
}

/** Where a method or class decorator keeps its metadata: the method itself, or the class. */
function targetOf(target: object, descriptor: PropertyDescriptor | undefined): object {
  return (descriptor?.value as object | undefined) ?? target;
}

/**
 * Overrides the named throttlers `forRoot` declares, on a handler or a controller (a name it
 * does not declare is ignored). The metadata keys are @nestjs/throttler's, so either package's
 * guard reads it.
 *
 * @example @Throttle({ default: { limit: 3, ttl: 60_000 } })
 */
export const Throttle =
  (options: Record<string, ThrottlerMethodOrControllerOptions>): MethodDecorator & ClassDecorator =>
  (target: object, _propertyKey?: string | symbol, descriptor?: PropertyDescriptor): any => {
    const on = targetOf(target, descriptor);
    for (const name in options) {
      const { ttl, limit, blockDuration, getTracker, generateKey } = options[name];
      Reflect.defineMetadata(THROTTLER_TTL + name, ttl, on);
      Reflect.defineMetadata(THROTTLER_LIMIT + name, limit, on);
      Reflect.defineMetadata(THROTTLER_BLOCK_DURATION + name, blockDuration, on);
      Reflect.defineMetadata(THROTTLER_TRACKER + name, getTracker, on);
      Reflect.defineMetadata(THROTTLER_KEY_GENERATOR + name, generateKey, on);
    }
    return descriptor ?? target;
  };

/**
 * Skips throttlers by name on a handler or a controller; `{ name: false }` on a handler
 * re-enables one its class skips.
 *
 * @example @SkipThrottle()                      // skips 'default'
 * @example @SkipThrottle({ short: false })      // re-enables 'short' under a skipping class
 */
export const SkipThrottle =
  (skip: Record<string, boolean> = { default: true }): MethodDecorator & ClassDecorator =>
  (target: object, _propertyKey?: string | symbol, descriptor?: PropertyDescriptor): any => {
    const on = targetOf(target, descriptor);
    for (const name in skip) Reflect.defineMetadata(THROTTLER_SKIP + name, skip[name], on);
    return descriptor ?? target;
  };

/** Injects the module's options. @example constructor(@InjectThrottlerOptions() options: ThrottlerModuleOptions) {} */
export const InjectThrottlerOptions = (): PropertyDecorator & ParameterDecorator => Inject(getOptionsToken());

/** Injects the module's storage. @example constructor(@InjectThrottlerStorage() storage: ThrottlerStorage) {} */
export const InjectThrottlerStorage = (): PropertyDecorator & ParameterDecorator => Inject(getStorageToken());
