import { type ExecutionContext, IntrinsicException, Logger } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import type { LimitedRequest } from '../keys/identity.js';
import { type Refusal, refusal } from '../rate-limit.exception.js';
import { graphqlWithoutRequest, storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { RateLimitContext } from './rate-limit-context.js';

/**
 * A resolver's GraphQL context: Apollo's (`@nestjs/apollo`) holds the Express request and
 * response, Mercurius's (`@nestjs/mercurius`) the Fastify reply and, through it, the request.
 */
interface GraphqlContext {
  req?: LimitedRequest;
  res?: unknown;
  reply?: { request?: LimitedRequest };
}

/** A resolver's `info`, as far as this reads it. */
interface ResolveInfo {
  operation?: { operation?: string };
}

/** Requests whose GraphQL context holds no HTTP request: one bucket for all, as for an unknown IP. */
const NO_REQUEST: LimitedRequest = Object.freeze({ headers: Object.freeze({}) });

/**
 * An error a resolver ends with: GraphQL copies its `extensions` into the field's error, as
 * Apollo and Mercurius send it. Not an `HttpException` (Apollo would turn that into a code of
 * its own), and an `IntrinsicException`, so Nest does not log it.
 */
export class RateLimitGraphqlError extends IntrinsicException {
  constructor(
    message: string,
    readonly extensions: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'RateLimitGraphqlError';
  }
}

/**
 * GraphQL operations (`@nestjs/graphql` with Apollo or Mercurius): keys read the operation's
 * HTTP request, headers go on its HTTP response, and a refusal is the field's error with
 * `extensions: { code: 'RATE_LIMITED', policy, retryAfter }`. The guard runs once per root field;
 * the target is the HTTP request, so the fields of one request are charged once. Subscriptions
 * are not limited (no HTTP request per event).
 *
 * Nothing of `graphql` or `@nestjs/graphql` is imported: a resolver's arguments are
 * `(root, args, context, info)` as they are.
 */
export class GraphqlRateLimitContext implements RateLimitContext {
  private readonly logger = new Logger('RateLimitGuard');
  private requestMissed = false;

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  request(context: ExecutionContext): LimitedRequest | undefined {
    if (context.getArgByIndex<ResolveInfo | undefined>(3)?.operation?.operation === 'subscription') return undefined;
    const request = httpRequest(context);
    if (request !== undefined) return request;
    if (!this.requestMissed) {
      this.requestMissed = true;
      this.logger.warn(graphqlWithoutRequest);
    }
    return NO_REQUEST;
  }

  target(context: ExecutionContext): object {
    return httpRequest(context) ?? context.getArgByIndex<object | undefined>(2) ?? context.getArgs();
  }

  setHeader(context: ExecutionContext, name: string, value: string): void {
    const graphql = context.getArgByIndex<GraphqlContext | undefined>(2);
    const response = graphql?.res ?? graphql?.reply;
    if (response !== undefined) this.adapterHost.httpAdapter?.setHeader(response, name, value);
  }

  refusal(decision: RateLimitDecision, cost: number): Error {
    const { message, ...extensions }: Refusal = refusal(decision, cost);
    return withoutStack(() => new RateLimitGraphqlError(message, { code: 'RATE_LIMITED', ...extensions }));
  }

  unavailable(): Error {
    return withoutStack(() => new RateLimitGraphqlError(storeUnavailable, { code: 'RATE_LIMIT_UNAVAILABLE', retryAfter: 1 }));
  }
}

/** The operation's HTTP request: Apollo's `context.req`, Mercurius's `context.reply.request`. */
function httpRequest(context: ExecutionContext): LimitedRequest | undefined {
  const graphql = context.getArgByIndex<GraphqlContext | undefined>(2);
  return graphql?.req ?? graphql?.reply?.request;
}
