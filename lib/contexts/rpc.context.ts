import { RpcException } from '@nestjs/microservices';
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

/**
 * Microservice messages and events, on any transport: there are no headers to set, and a refusal
 * is an `RpcException` whose error is `{ status: 'error', message, statusCode: 429, policy,
 * retryAfter }`, which the caller of a message receives. A refused event is dropped: its handler
 * does not run.
 */
export class RpcRateLimitContext implements RateLimitContext {
  request(): LimitedRequest {
    return MESSAGE;
  }

  setHeader(): void {
    // a message has no headers
  }

  refusal(decision: RateLimitDecision, cost: number): Error {
    return withoutStack(() => new RpcException({ status: 'error', statusCode: 429, ...refusal(decision, cost) }));
  }

  unavailable(): Error {
    return withoutStack(() => new RpcException({ status: 'error', statusCode: 503, message: storeUnavailable, retryAfter: 1 }));
  }
}
