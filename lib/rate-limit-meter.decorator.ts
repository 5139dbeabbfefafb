import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { lentMeters } from './limiter/meter-loans.js';
import type { RateLimitMeter as Meter } from './limiter/rate-limit-meter.js';
import { meterUnavailable } from './rate-limit.messages.js';
import { RATE_LIMIT_METERS } from './rate-limit.constants.js';

/** The meter a parameter asks for; where the request has none, one that charges nothing and says why. */
function meterOf(policy: string | undefined, context: ExecutionContext): Meter {
  const meters = lentMeters(context);
  const meter = meters === undefined ? undefined : policy === undefined ? [...meters.values()][0] : meters.get(policy);
  return meter ?? new DetachedMeter(meterUnavailable(context, policy));
}

const meterParam = createParamDecorator<string | undefined>((policy, context) => meterOf(policy, context));

/** A request's meter (see the interface in `limiter/rate-limit-meter.ts`): the decorator's name is its type too. */
export type RateLimitMeter = Meter;

/**
 * Gives the handler the meter of its request under a policy that settles (its `name`; without
 * one, the route's only policy that settles): what it adds is the request's real cost, charged
 * when the request ends, however it ends (see `RateLimitMeter`). The route's policy is checked
 * at start: one that does not settle, or none, fails `app.init()` naming the handler.
 *
 * @example
 * @Post('v1/chat/completions')
 * @Sse()
 * chat(@Body() body: ChatBody, @RateLimitMeter('tpm') meter: RateLimitMeter) { ... meter.add(n) ... }
 */
export function RateLimitMeter(policy?: string): ParameterDecorator {
  const param = meterParam(policy);
  return (target, property, index) => {
    if (property !== undefined) {
      const handler = (target as Record<string | symbol, object>)[property];
      const named = (Reflect.getMetadata(RATE_LIMIT_METERS, handler) as (string | undefined)[] | undefined) ?? [];
      Reflect.defineMetadata(RATE_LIMIT_METERS, [...named, policy], handler);
    }
    param(target, property, index);
  };
}

/**
 * A meter where the request has none to give (the module not in the app, as in a controller's own
 * unit test, or a route the module does not limit): it counts, and charges nothing.
 */
class DetachedMeter implements Meter {
  count = 0;
  readonly charged = 0;
  readonly exhausted = false;
  readonly signal = new AbortController().signal;

  constructor(readonly why: string) {}

  add(n: number): void {
    this.count += n;
  }

  set(n: number): void {
    this.count = n;
  }
}
