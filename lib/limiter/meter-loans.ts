import type { ExecutionContext } from '@nestjs/common';
import { handlerArgument } from '../contexts/handler-argument.js';
import type { Meter } from './rate-limit-meter.js';

/**
 * The meters a request's end lends its handler's parameters (`@RateLimitMeter()`), by the
 * argument both see (see `handlerArgument`): the interceptor that hears the handler lends them as
 * it calls it and takes them back when the handler is done; each parameter reads them meanwhile.
 */
const LOANS = new WeakMap<object, ReadonlyMap<string, Meter>>();

/** Lends `meters` to the handler called in `context`; the function returned takes them back. */
export function lendMeters(context: ExecutionContext, meters: ReadonlyMap<string, Meter>): () => void {
  const argument = handlerArgument(context);
  if (argument === undefined) return () => undefined;
  LOANS.set(argument, meters);
  return () => {
    if (LOANS.get(argument) === meters) LOANS.delete(argument);
  };
}

/** The meters lent to the handler called in `context`; `undefined` when none are. */
export function lentMeters(context: ExecutionContext): ReadonlyMap<string, Meter> | undefined {
  const argument = handlerArgument(context);
  return argument === undefined ? undefined : LOANS.get(argument);
}
