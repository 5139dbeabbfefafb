import { type ExecutionContext, IntrinsicException } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { PATTERN_HANDLER_METADATA } from '@nestjs/microservices/constants.js';
import { PatternHandler } from '@nestjs/microservices/enums/pattern-handler.enum.js';
import type { LimitedRequest } from '../keys/identity.js';
import { refusal } from '../rate-limit.exception.js';
import { storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { RateLimitContext } from './rate-limit-context.js';

/**
 * A message has no address, headers or user the module could read in every transport: only `key`
 * functions (which get the payload and the transport's context) tell callers apart, and when none
 * yields, all callers share the policy's bucket (`ip:unknown`).
 */
const MESSAGE: LimitedRequest = Object.freeze({ headers: Object.freeze({}) });

/** What the caller of a refused message receives: `{ status: 'error', message, statusCode, ... }`. */
type RpcError = { status: 'error'; statusCode: number; message: string } & Record<string, unknown>;

/**
 * An event the limiter refused (or could not decide under `failMode: 'closed'`), dropped: its
 * handler does not run. An event has no caller to answer, so Nest logs an `RpcException` thrown
 * for it, once per event, at the moment a flood of them arrives; it logs no
 * `IntrinsicException`. `error` is what the caller of a message would have received.
 */
class RateLimitDroppedEvent extends IntrinsicException {
  constructor(readonly error: RpcError) {
    super(error.message);
    this.name = 'RateLimitDroppedEvent';
  }
}

/**
 * Microservice messages and events, on any transport: there are no headers to set. A refused
 * message ends with an `RpcException` whose error is `{ status: 'error', message, statusCode: 429,
 * policy, retryAfter }`, which the caller's `send` observable fails with; a refused event is
 * dropped quietly (`RateLimitDroppedEvent`). The guard runs on a message's arguments, so a
 * global guard and `@UseGuards` charge it once.
 */
export class RpcRateLimitContext implements RateLimitContext {
  request(): LimitedRequest {
    return MESSAGE;
  }

  setHeader(): void {
    // a message has no headers
  }

  refusal(decision: RateLimitDecision, cost: number, context: ExecutionContext): Error {
    return this.answer({ status: 'error', statusCode: 429, ...refusal(decision, cost) }, context);
  }

  unavailable(_cause: unknown, context: ExecutionContext): Error {
    return this.answer({ status: 'error', statusCode: 503, message: storeUnavailable, retryAfter: 1 }, context);
  }

  /** The error a message ends with: an `RpcException` for its caller, or an event dropped. */
  private answer(error: RpcError, context: ExecutionContext): Error {
    const event = Reflect.getMetadata(PATTERN_HANDLER_METADATA, context.getHandler()) === PatternHandler.EVENT;
    return withoutStack(() => (event ? new RateLimitDroppedEvent(error) : new RpcException(error)));
  }
}
