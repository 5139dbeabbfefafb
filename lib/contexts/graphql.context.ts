import { type ExecutionContext, IntrinsicException, Logger } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import type { LimitedRequest } from '../keys/identity.js';
import { type Refusal, refusal } from '../rate-limit.exception.js';
import { graphqlWithoutRequest, storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import { responseEnded } from './http.context.js';
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
  /**
   * The operation's variables as graphql-js and graphql-jit coerce them: an object made for each
   * execution (each operation of a batch has its own; a cached document does not share it).
   */
  variableValues?: unknown;
  /** The field's nodes in the document; the first names its selection (a cached document's nodes serve every request). */
  fieldNodes?: readonly unknown[];
  /** Where the field's value goes in the answer: response keys (aliases) and, for items of a list, indices (numbers). */
  path?: ResponsePath;
}

/** graphql-js's `Path` (graphql-jit's has no `typename`). */
interface ResponsePath {
  readonly prev: ResponsePath | undefined;
  readonly key: string | number;
}

/**
 * One execution of a query or mutation: what the guard reads for it, and the target its
 * operation-wide policies are charged once on (see `target`). Made when its first field asks, and
 * gone with the execution (it is kept by the execution's own `variableValues`).
 */
interface Operation {
  /** The request its keys read; `undefined` when its context holds none. */
  request: LimitedRequest | undefined;
  /** The HTTP response its headers go on (the operations of a batch share it); none over a WebSocket. */
  response: object | undefined;
  /** Its selections, each charged once (see `selection`): by field node, then by path without list indices. */
  selections?: Map<unknown, Map<string, object>>;
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
 * `extensions: { code: 'RATE_LIMITED', policy, retryAfter }`. The guard runs once per root field
 * (and per object a guarded field resolver resolves). What it charges once is one execution of an
 * operation (each operation of a batched HTTP request is one), and for a policy on the field's
 * own handler, one selection of that field in it: each alias is its own, the items of a list
 * under one are not. The headers of one HTTP response are written from every decision its
 * operations and fields made. A query or mutation sent over a WebSocket is keyed by the upgrade
 * request, with no headers. Subscriptions are not limited: the guard runs when one starts, never
 * per event.
 *
 * Nothing of `graphql` or `@nestjs/graphql` is imported: a resolver's arguments are
 * `(root, args, context, info)` as they are.
 */
export class GraphqlRateLimitContext implements RateLimitContext {
  private readonly logger = new Logger('RateLimitGuard');
  private requestMissed = false;
  /** Each execution's operation, by the object that is its own (see `executionOf`). */
  private readonly operations = new WeakMap<object, Operation>();

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  request(context: ExecutionContext): LimitedRequest | undefined {
    if (context.getArgByIndex<ResolveInfo | undefined>(3)?.operation?.operation === 'subscription') return undefined;
    const request = this.operationOf(context)?.request;
    if (request !== undefined) return request;
    if (!this.requestMissed) {
      this.requestMissed = true;
      this.logger.warn(graphqlWithoutRequest);
    }
    return NO_REQUEST;
  }

  /** The execution of the operation: its fields share what it was charged. */
  target(context: ExecutionContext): object {
    return this.operationOf(context) ?? context.getArgs();
  }

  /**
   * The field's selection in its operation: its node in the document and its path of response
   * keys (so each alias, and each place a fragment is spread, is one), without list indices (so
   * a field resolver run for every item of a list is one).
   */
  selection(context: ExecutionContext): object {
    const operation = this.operationOf(context);
    const info = context.getArgByIndex<ResolveInfo | undefined>(3);
    const node = info?.fieldNodes?.[0];
    if (operation === undefined || node === undefined) return operation ?? context.getArgs();
    const byNode = (operation.selections ??= new Map<unknown, Map<string, object>>());
    let byPath = byNode.get(node);
    if (byPath === undefined) byNode.set(node, (byPath = new Map<string, object>()));
    const path = pathOf(info?.path);
    let selection = byPath.get(path);
    if (selection === undefined) byPath.set(path, (selection = {}));
    return selection;
  }

  setHeader(context: ExecutionContext, name: string, value: string): void {
    const response = this.operationOf(context)?.response;
    if (response !== undefined) this.adapterHost.httpAdapter?.setHeader(response, name, value);
  }

  /** The HTTP response: every field of every operation of one HTTP request writes its headers. */
  sharedAnswer(context: ExecutionContext): object | undefined {
    return this.operationOf(context)?.response;
  }

  /** Express's response and Fastify's reply both have `removeHeader`. */
  removeHeader(context: ExecutionContext, name: string): void {
    (this.operationOf(context)?.response as { removeHeader?(name: string): unknown } | undefined)?.removeHeader?.(name);
  }

  /**
   * The operation's HTTP response finished or closed (see `RateLimitContext.ended`): the end of
   * every operation it carries. `undefined` over a WebSocket, where an operation has no response:
   * each field's outcome ends what was charged for it.
   */
  ended(context: ExecutionContext): Promise<boolean> | undefined {
    return responseEnded(this.operationOf(context)?.response);
  }

  refusal(decision: RateLimitDecision, cost: number): Error {
    const { message, ...extensions }: Refusal = refusal(decision, cost);
    return withoutStack(() => new RateLimitGraphqlError(message, { code: 'RATE_LIMITED', ...extensions }));
  }

  unavailable(): Error {
    return withoutStack(
      () => new RateLimitGraphqlError(storeUnavailable, { code: 'RATE_LIMIT_UNAVAILABLE', retryAfter: 1 }),
    );
  }

  /** The operation a resolver runs in, made when its first field asks; `undefined` when nothing tells its execution. */
  private operationOf(context: ExecutionContext): Operation | undefined {
    const execution = executionOf(context);
    if (execution === undefined) return undefined;
    let operation = this.operations.get(execution);
    if (operation === undefined) this.operations.set(execution, (operation = readOperation(context.getArgByIndex(2))));
    return operation;
  }
}

/**
 * The object that is one execution's own: its `variableValues`, made by graphql-js and
 * graphql-jit for each (the GraphQL context is one per operation on Apollo and Mercurius, but an
 * app's `context` could hand every request the same object); else the GraphQL context.
 */
function executionOf(context: ExecutionContext): object | undefined {
  const variables = context.getArgByIndex<ResolveInfo | undefined>(3)?.variableValues;
  if (typeof variables === 'object' && variables !== null) return variables;
  const graphql = context.getArgByIndex<unknown>(2);
  return typeof graphql === 'object' && graphql !== null ? graphql : undefined;
}

/** The request and response of an operation, wherever its driver keeps them (see `GraphqlContext`). */
function readOperation(graphql: GraphqlContext | null | undefined): Operation {
  if (typeof graphql !== 'object' || graphql === null) return { request: undefined, response: undefined };
  const { req, reply } = graphql;
  if (isRequest(req)) {
    // Mercurius's reply over HTTP is Fastify's, with the Node response as `raw`
    const response = graphql.res ?? (reply?.raw === undefined ? req.res : reply);
    return { request: req, response: typeof response === 'object' && response !== null ? response : undefined };
  }
  // over a WebSocket the socket keeps one request for all its operations
  const upgrade = req?.extra?.request;
  if (isRequest(upgrade))
    return { request: { ip: upgrade.socket?.remoteAddress, headers: upgrade.headers }, response: undefined };
  const request = graphql.request ?? reply?.request;
  return { request: isRequest(request) ? request : undefined, response: undefined };
}

/** A field's path of response keys, without list indices: `'shelf.reviews'` for `shelf[0].reviews` and `shelf[1].reviews`. */
function pathOf(path: ResponsePath | undefined): string {
  let keys = '';
  for (let at = path; at; at = at.prev) {
    if (typeof at.key === 'string') keys = keys === '' ? at.key : `${at.key}.${keys}`;
  }
  return keys;
}

/** Whether a value of a GraphQL context is a request: anything with headers. */
function isRequest<T extends { headers: unknown }>(value: T | object | undefined): value is T {
  const headers = (value as { headers?: unknown } | undefined)?.headers;
  return typeof headers === 'object' && headers !== null;
}
