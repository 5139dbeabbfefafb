import { type ExecutionContext, IntrinsicException } from '@nestjs/common';
import type { RpcException } from '@nestjs/microservices';
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
  /** The seam, with `@nestjs/microservices` (an optional peer) imported now: the first message is here. */
  static async load(): Promise<RpcRateLimitContext> {
    const [{ RpcException }, { PATTERN_HANDLER_METADATA }, { PatternHandler }] = await Promise.all([
      import('@nestjs/microservices'),
      import('@nestjs/microservices/constants.js'),
      import('@nestjs/microservices/enums/pattern-handler.enum.js'),
    ]);
    const isEvent = (handler: object): boolean =>
      Reflect.getMetadata(PATTERN_HANDLER_METADATA, handler) === PatternHandler.EVENT;
    return new RpcRateLimitContext(RpcException, isEvent);
  }

  private constructor(
    private readonly Exception: typeof RpcException,
    /** Whether a handler is an `@EventPattern`'s (else a `@MessagePattern`'s). */
    private readonly isEvent: (handler: object) => boolean,
  ) {}

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
    const event = this.isEvent(context.getHandler());
    return withoutStack(() => (event ? new RateLimitDroppedEvent(error) : new this.Exception(error)));
  }
}
