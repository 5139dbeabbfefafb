import { UseInterceptors } from '@nestjs/common';
import { obligationsOf } from './policy/obligations.js';
import type { RateLimitPolicy } from './policy/policy.types.js';
import { RATE_LIMIT_POLICIES, RATE_LIMIT_SKIP } from './rate-limit.constants.js';
import { RateLimitOutcomeInterceptor } from './rate-limit-outcome.interceptor.js';

/** A decorated class (a constructor is an object too) or, for a handler, its class's prototype. */
type Target = object;

function defineOn(key: string, value: (previous: any) => unknown): ClassDecorator & MethodDecorator {
  return ((target: Target, _property?: string | symbol, descriptor?: PropertyDescriptor) => {
    const holder = descriptor ? (descriptor.value as object) : target;
    Reflect.defineMetadata(key, value(Reflect.getMetadata(key, holder)), holder);
    return descriptor;
  }) as ClassDecorator & MethodDecorator;
}

/**
 * Limits a controller (one bucket shared by its routes) or a handler. Takes one policy or a list
 * (a request must pass all of them); several `@RateLimit` on one target add up. Policies are
 * validated when the application starts.
 *
 * @example @RateLimit({ rps: 10, burst: 50 })
 * @example @RateLimit([{ name: 'per-user', rps: 5, burst: 10, key: 'user' }, { name: 'per-ip', limit: 1000, window: '1h', key: 'ip' }])
 */
export function RateLimit(policy: RateLimitPolicy | RateLimitPolicy[]): ClassDecorator & MethodDecorator {
  // An empty list stays in as one entry, so that start can refuse it naming the route.
  const added = Array.isArray(policy) && policy.length > 0 ? policy : [policy];
  const define = defineOn(RATE_LIMIT_POLICIES, (previous: RateLimitPolicy[] = []) => [...added, ...previous]);
  // only the routes of policies that owe something at a request's end run the interceptor that hears it
  return added.some((each) => !Array.isArray(each) && obligationsOf(each).atEnd) ? withOutcomes(define) : define;
}

/** `define`, with `RateLimitOutcomeInterceptor` on the same class or handler. */
function withOutcomes(define: ClassDecorator & MethodDecorator): ClassDecorator & MethodDecorator {
  const intercept = UseInterceptors(RateLimitOutcomeInterceptor);
  return ((target: Target, property: string | symbol, descriptor: PropertyDescriptor) => {
    intercept(target, property, descriptor);
    return define(target, property, descriptor);
  }) as ClassDecorator & MethodDecorator;
}

/**
 * Exempts a controller or handler from rate limiting: from every policy (module ones included),
 * or only from the named ones.
 *
 * @example @SkipRateLimit()          // health checks
 * @example @SkipRateLimit('per-ip')
 */
export function SkipRateLimit(...policyNames: string[]): ClassDecorator & MethodDecorator {
  return defineOn(RATE_LIMIT_SKIP, (previous: true | string[] | undefined) =>
    policyNames.length === 0 || previous === true ? true : [...(previous ?? []), ...policyNames],
  );
}
