import { type ExecutionContext, IntrinsicException, Logger } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import type { LimitedRequest } from '../keys/identity.js';
import { type Refusal, refusal } from '../rate-limit.exception.js';
import { graphqlWithoutRequest, storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { RateLimitContext } from './rate-limit-context.js';

/**
 * A resolver's GraphQL context, as the drivers build it. Over HTTP, `@nestjs/graphql` puts the
 * framework's request in `req`: Apollo on Express keeps no response beside it (Express's `req.res`
 * is one), Mercurius keeps the Fastify `reply`; an app's own context may add `res` or `reply`.
 * Over a WebSocket (graphql-ws), Apollo's `req` is graphql-ws's own context, whose `extra.request`
 * is the upgrade request, and Mercurius keeps that request as `request` (and, for subscriptions,
 * as `reply.request` in a stand-in reply that sends nothing).
 */
interface GraphqlContext {
  req?: HttpRequest | { extra?: { request?: UpgradeRequest } };
  res?: unknown;
  reply?: { request?: LimitedRequest; raw?: unknown };
  request?: LimitedRequest;
}

/** An Express or Fastify request; Express's holds its response. */
type HttpRequest = LimitedRequest & { res?: unknown };

/** Node's request of a WebSocket upgrade: headers and the connection, no `ip`. */
interface UpgradeRequest {
  headers: LimitedRequest['headers'];
  socket?: { remoteAddress?: string };
}

/** A resolver's `info`, as far as this reads it. */
interface ResolveInfo {
  operation?: { operation?: string };
}

/** What the guard reads and writes for one operation. */
interface Operation {
  request: LimitedRequest;
  /** Charged once: the HTTP request, or the context of an operation sent over a WebSocket. */
  target: object;
  /** The HTTP response the headers go on; none over a WebSocket. */
  response?: unknown;
}

/** Requests whose GraphQL context holds no request: one bucket for all, as for an unknown IP. */
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
 * the target is the HTTP request, so the fields of one request are charged once. A query or
 * mutation sent over a WebSocket is keyed by the upgrade request and charged once per operation,
 * with no headers. Subscriptions are not limited: the guard runs when one starts, never per event.
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
    const operation = operationOf(context);
    if (operation !== undefined) return operation.request;
    if (!this.requestMissed) {
      this.requestMissed = true;
      this.logger.warn(graphqlWithoutRequest);
    }
    return NO_REQUEST;
  }

  target(context: ExecutionContext): object {
    return operationOf(context)?.target ?? context.getArgByIndex<object | undefined>(2) ?? context.getArgs();
  }

  setHeader(context: ExecutionContext, name: string, value: string): void {
    const response = operationOf(context)?.response;
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

/**
 * The request, target and response of a resolver's operation, wherever its driver keeps them
 * (see `GraphqlContext`); `undefined` when its context holds no request.
 */
function operationOf(context: ExecutionContext): Operation | undefined {
  const graphql = context.getArgByIndex<GraphqlContext | null | undefined>(2);
  if (typeof graphql !== 'object' || graphql === null) return undefined;
  const { req, reply } = graphql;
  if (isRequest(req)) {
    // Mercurius's reply over HTTP is Fastify's, with the Node response as `raw`
    return { request: req, target: req, response: graphql.res ?? (reply?.raw === undefined ? req.res : reply) };
  }
  // over a WebSocket, each operation has a context of its own; the socket keeps one request for all
  const upgrade = (req as { extra?: { request?: UpgradeRequest } } | undefined)?.extra?.request;
  if (isRequest(upgrade)) return { request: { ip: upgrade.socket?.remoteAddress, headers: upgrade.headers }, target: graphql };
  const request = graphql.request ?? reply?.request;
  return isRequest(request) ? { request, target: graphql } : undefined;
}

/** Whether a value of a GraphQL context is a request: anything with headers. */
function isRequest<T extends { headers: unknown }>(value: T | object | undefined): value is T {
  const headers = (value as { headers?: unknown } | undefined)?.headers;
  return typeof headers === 'object' && headers !== null;
}
