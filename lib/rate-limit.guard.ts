import { ServerResponse } from 'node:http';
import { type CanActivate, type ExecutionContext, HttpException, Inject, Injectable, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { type HeaderPlan, headerPlan, rateLimitHeaders } from './headers/rate-limit-headers.js';
import { keyOf } from './keys/bucket-key.js';
import { headerValue, type KeyedRequest, resolveIdentity } from './keys/identity.js';
import type { CostSource } from './policy/policy.types.js';
import { type RoutePolicy, RoutePolicies } from './policy/route-policies.js';
import { RATE_LIMIT_OPTIONS } from './rate-limit.constants.js';
import { clientClosedRequest, forwardedForIgnored, shadowRefusal } from './rate-limit.messages.js';
import { RateLimitExceededException, RateLimitUnavailableException } from './rate-limit.exception.js';
import type { ResolvedOptions } from './rate-limit-options.js';
import { RateLimiterService } from './rate-limiter.service.js';
import { RateLimitStoreError } from './stores/rate-limit-store.error.js';
import type { RateLimitDecision, RateLimitRequest } from './stores/rate-limit-store.interface.js';

/** The request as the guard reads it: Express and Fastify requests both fit. */
type GuardedRequest = KeyedRequest & {
  query?: Record<string, unknown>;
  /** Express's connection, and Fastify's Node request that holds it. */
  socket?: { remoteAddress?: string };
  raw?: { socket?: { remoteAddress?: string } };
};

/** A decimal number, as a cost header or query parameter must be written. */
const DECIMAL = /^\d{1,15}(\.\d{1,15})?$/;

/** nginx's status for a request whose client closed the connection before the answer. */
const CLIENT_CLOSED_REQUEST = 499;

/**
 * Applies the route's policies to each HTTP request: works out the identity and cost of every
 * policy, asks the store for one all-or-nothing decision, sets the rate-limit headers through
 * the HTTP adapter (Express and Fastify alike), then lets the request through (after its turn
 * in the queue, for a `leaky_bucket`) or throws `RateLimitExceededException` (429).
 * Registered globally by `RateLimitModule` unless `guard: false`; then use it as
 * `@UseGuards(RateLimitGuard)`.
 *
 * Its steps are `protected` so an app can subclass it (e.g. to key by tenant) instead of forking.
 *
 * Order matters for `key: 'user'`: the guard reads `req.user`, so the app's auth guard must run
 * first (register it before this module's guard, or use `guard: false` and `@UseGuards(Auth, RateLimitGuard)`).
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  protected readonly logger = new Logger('RateLimitGuard');
  private forwardedForChecked = false;
  /** Each route's header plan, by its (cached) list of policies; `null`: no headers. */
  private readonly plans = new WeakMap<readonly RoutePolicy[], HeaderPlan | null>();

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) protected readonly options: ResolvedOptions,
    protected readonly routes: RoutePolicies,
    protected readonly limiter: RateLimiterService,
    protected readonly adapterHost: HttpAdapterHost,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (context.getType() !== 'http') return true;
    const policies = this.routes.forRoute(context.getClass(), context.getHandler() as () => unknown);
    if (policies.length === 0) return true;

    const http = context.switchToHttp();
    const request = http.getRequest<GuardedRequest>();
    const response = http.getResponse<unknown>();
    const requests = await this.buildRequests(policies, request, context);

    let decisions: RateLimitDecision[];
    try {
      decisions = await this.limiter.decide(requests, true);
    } catch (error) {
      if (error instanceof RateLimitStoreError) return this.onStoreFailure(error, response);
      throw error;
    }

    this.setHeaders(response, policies, decisions);
    const refused = refusing(decisions);
    if (this.options.mode === 'shadow') {
      if (refused !== undefined) this.onShadowRefusal(refused, context);
      return true;
    }
    if (refused === undefined) {
      // a leaky_bucket admits a request for its turn in the queue: wait until then
      if (decisions.some((decision) => decision.delay > 0)) await this.waitTurn(decisions, response);
      return true;
    }
    if (Number.isFinite(refused.retryAfter)) this.setHeader(response, 'Retry-After', String(refused.retryAfter));
    throw refusal(refused, requests[decisions.indexOf(refused)].cost);
  }

  /** One store request per policy: its bucket key for this client and its cost. */
  protected async buildRequests(
    policies: readonly RoutePolicy[],
    request: GuardedRequest,
    context: ExecutionContext,
  ): Promise<RateLimitRequest[]> {
    const requests: RateLimitRequest[] = [];
    for (const policy of policies) {
      const identity = this.resolveIdentity(policy, request, context);
      const cost = this.resolveCost(policy.cost, policy.defaultCost, request, context);
      requests.push({
        key: keyOf(policy.keyPrefix, identity),
        policy: policy.name,
        limit: policy.limit,
        cost: typeof cost === 'number' ? cost : await cost,
      });
    }
    return requests;
  }

  /** The identity a policy limits this request as (see `KeySource`). */
  protected resolveIdentity(policy: RoutePolicy, request: GuardedRequest, context: ExecutionContext): string {
    const identity = resolveIdentity(policy.keys, request, context, this.options);
    if (!this.forwardedForChecked && identity.startsWith('ip:')) this.checkForwardedFor(request);
    return identity;
  }

  /**
   * Warns once when a request carries `X-Forwarded-For` but the framework did not use it for
   * `req.ip`: behind a proxy the app has not been told to trust, every client would share the
   * proxy's bucket. The module itself never reads the header (a client can write anything in it).
   */
  private checkForwardedFor(request: GuardedRequest): void {
    if (request.headers['x-forwarded-for'] === undefined) return;
    this.forwardedForChecked = true;
    const address = (request.socket ?? request.raw?.socket)?.remoteAddress;
    if (address !== undefined && request.ip === address) this.logger.warn(forwardedForIgnored(address));
  }

  /**
   * Tokens this request takes. A header or query value must be a positive decimal number;
   * anything else (absent, `abc`, `-1`, `1e400`, `0`) is `defaultCost`, never an error.
   */
  protected resolveCost(
    cost: CostSource,
    defaultCost: number,
    request: GuardedRequest,
    context: ExecutionContext,
  ): number | Promise<number> {
    if (typeof cost === 'number') return cost;
    if (typeof cost === 'function') {
      const raw = cost(context);
      const pending = typeof (raw as PromiseLike<unknown> | undefined)?.then === 'function';
      return pending ? Promise.resolve(raw).then((value) => validCost(value, defaultCost)) : validCost(raw, defaultCost);
    }
    let raw: unknown;
    if (cost.startsWith('header:')) raw = headerValue(request, cost.slice('header:'.length).toLowerCase());
    else {
      const value = request.query?.[cost.slice('query:'.length)];
      raw = Array.isArray(value) ? value[0] : value;
    }
    return validCost(raw, defaultCost);
  }

  /** Sets the configured header families for the decisions. */
  protected setHeaders(response: unknown, policies: readonly RoutePolicy[], decisions: readonly RateLimitDecision[]): void {
    let plan = this.plans.get(policies);
    if (plan === undefined) this.plans.set(policies, (plan = headerPlan(this.options.headers, policies) ?? null));
    if (plan === null) return;
    for (const [name, value] of rateLimitHeaders(plan, decisions, Date.now())) this.setHeader(response, name, value);
  }

  /**
   * In shadow mode, a request the policies refuse passes; this logs it (a warning naming the
   * policy and the route), so what enforcing would block can be counted before switching.
   */
  protected onShadowRefusal(refused: RateLimitDecision, context: ExecutionContext): void {
    this.logger.warn(shadowRefusal(refused.policy, `${context.getClass().name}.${context.getHandler().name}`, refused.retryAfter));
  }

  /**
   * Holds an admitted `leaky_bucket` request until its turn. When its client goes away first
   * (the connection closes before the answer), the turn is given back and the handler does not
   * run: the request ends with a 499 that no one receives and Nest does not log (an
   * `HttpException`). When the app shuts down first, the turn is given back too and the client
   * gets a 503 (`RateLimitUnavailableException`) with `Retry-After: 1`.
   */
  protected async waitTurn(decisions: readonly RateLimitDecision[], response: unknown): Promise<void> {
    const raw = nodeResponse(response);
    const gone = new AbortController();
    const leave = (): void => gone.abort();
    raw?.once('close', leave);
    // a client that left while the store decided: its 'close' has been and gone
    if (raw?.destroyed) gone.abort();
    try {
      await this.limiter.wait(decisions, gone.signal);
    } catch (error) {
      if (gone.signal.aborted) throw withoutStack(() => new HttpException(clientClosed, CLIENT_CLOSED_REQUEST));
      if (error instanceof RateLimitUnavailableException) this.setHeader(response, 'Retry-After', '1');
      throw error;
    } finally {
      raw?.off('close', leave);
    }
  }

  /** What a request gets when the store cannot decide: `failMode` 'open' lets it through. */
  protected onStoreFailure(error: RateLimitStoreError, response: unknown): boolean {
    if (this.options.failMode === 'closed' && this.options.mode !== 'shadow') {
      this.setHeader(response, 'Retry-After', '1');
      throw new RateLimitUnavailableException(error);
    }
    return true;
  }

  protected setHeader(response: unknown, name: string, value: string): void {
    this.adapterHost.httpAdapter.setHeader(response, name, value);
  }
}

/** A cost as read from the request or a function: a positive finite number, else `defaultCost`. */
function validCost(raw: unknown, defaultCost: number): number {
  const parsed = typeof raw === 'string' ? (DECIMAL.test(raw) ? Number(raw) : NaN) : raw;
  return typeof parsed === 'number' && Number.isFinite(parsed) && parsed > 0 ? parsed : defaultCost;
}

/**
 * The 429 for a refused request, built without a stack trace: a refusal is an answer, not a
 * fault, nobody reads its stack, and capturing one through Nest's async call chain costs more
 * than the rest of the refusal (a flood of refused requests is exactly when it must be cheap).
 */
function refusal(refused: RateLimitDecision, cost: number): RateLimitExceededException {
  return withoutStack(() => new RateLimitExceededException(refused, cost));
}

/** The body of the 499 a request ends with when its client went away while it waited. */
const clientClosed = { statusCode: CLIENT_CLOSED_REQUEST, error: 'Client Closed Request', message: clientClosedRequest };

/** An exception made without capturing a stack trace (see `refusal`). */
function withoutStack<E extends Error>(make: () => E): E {
  const depth = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return make();
  } finally {
    Error.stackTraceLimit = depth;
  }
}

/** The Node response under the framework's: Express's response is one, Fastify's reply holds it as `raw`. */
function nodeResponse(response: unknown): ServerResponse | undefined {
  const raw = (response as { raw?: unknown } | undefined)?.raw ?? response;
  return raw instanceof ServerResponse ? raw : undefined;
}

/** The refusing decision that frees up last (a never-admittable one first), or `undefined`. */
function refusing(decisions: readonly RateLimitDecision[]): RateLimitDecision | undefined {
  let refused: RateLimitDecision | undefined;
  for (const decision of decisions) {
    if (!decision.allowed && (refused === undefined || decision.retryAfter > refused.retryAfter)) refused = decision;
  }
  return refused;
}
