import { UseInterceptors } from '@nestjs/common';
import { type Algorithm, RELEASED } from './algorithms/algorithm.types.js';
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
  return added.some(watchesOutcome) ? withOutcomes(define) : define;
}

/**
 * Whether a policy as written needs the request's outcome (or its end, for a slot it holds): only
 * its routes run `RateLimitOutcomeInterceptor`.
 */
function watchesOutcome(policy: RateLimitPolicy | RateLimitPolicy[]): boolean {
  if (typeof policy !== 'object' || policy === null || Array.isArray(policy)) return false;
  const tiers: unknown[] = typeof policy.tiers === 'object' && policy.tiers !== null ? Object.values(policy.tiers) : [];
  return (
    policy.count === 'failures' ||
    'adaptive' in policy ||
    holdsSlots(policy.algorithm) ||
    tiers.some((tier) => typeof tier === 'object' && tier !== null && holdsSlots((tier as RateLimitPolicy).algorithm))
  );
}

/** Whether an algorithm's charge is given back when the request ends (`concurrency`). */
function holdsSlots(algorithm: unknown): boolean {
  return typeof algorithm === 'string' && RELEASED.has(algorithm as Algorithm);
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
