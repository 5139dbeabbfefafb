import { ServerResponse } from 'node:http';
import { type ExecutionContext, HttpException, Injectable, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { LimitedRequest } from '../keys/identity.js';
import {
  PROBLEM_JSON,
  quotaExceeded,
  RateLimitExceededException,
  RateLimitUnavailableException,
  reducedCapacity,
} from '../rate-limit.exception.js';
import { clientClosedRequest, forwardedForIgnored } from '../rate-limit.messages.js';
import type { ErrorFormat } from '../rate-limit-options.interface.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { Departure, RateLimitContext } from './rate-limit-context.js';

/** An Express or Fastify request, with what the `X-Forwarded-For` check reads. */
type HttpRequest = LimitedRequest & {
  /** Express's connection, and Fastify's Node request that holds it. */
  socket?: { remoteAddress?: string };
  raw?: { socket?: { remoteAddress?: string } };
};

/** nginx's status for a request whose client closed the connection before the answer. */
const CLIENT_CLOSED_REQUEST = 499;

/** The body of the 499 a request ends with when its client went away while it waited. */
const clientClosed = {
  statusCode: CLIENT_CLOSED_REQUEST,
  error: 'Client Closed Request',
  message: clientClosedRequest,
};

/**
 * HTTP requests, on Express and Fastify alike: headers go through Nest's HTTP adapter, a refusal
 * is `RateLimitExceededException` (429), a store that cannot decide under `failMode: 'closed'` is
 * `RateLimitUnavailableException` (503), and a client that closes its connection while its
 * request waits ends it with a 499.
 *
 * With `errorFormat: 'problem'`, the 429 and the 503 carry an RFC 9457 body and the seam sets
 * `Content-Type: application/problem+json` with them: Nest's exception filter sends an
 * exception's body as JSON under a JSON type already set (`+json` included) on both adapters.
 */
@Injectable()
export class HttpRateLimitContext implements RateLimitContext {
  private readonly logger = new Logger('RateLimitGuard');
  private forwardedForChecked = false;
  /** Whether refusals are problem documents (`errorFormat: 'problem'`). */
  private readonly problem: boolean;

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    errorFormat: ErrorFormat = 'nest',
  ) {
    this.problem = errorFormat === 'problem';
  }

  request(context: ExecutionContext): LimitedRequest {
    // the arguments of an HTTP handler are (request, response, next): read without `switchToHttp()`,
    // which makes three closures per call
    return context.getArgByIndex<LimitedRequest>(0);
  }

  /** The request object: an interceptor's arguments are another list than the guards'. */
  target(context: ExecutionContext): object {
    return context.getArgByIndex<object>(0);
  }

  setHeader(context: ExecutionContext, name: string, value: string): void {
    this.adapterHost.httpAdapter.setHeader(context.getArgByIndex(1), name, value);
  }

  /**
   * The 429, built without a stack trace (see `withoutStack`). `RateLimitExceededException`'s
   * body names the policy and its `retryAfter`; a problem document lists every refusing policy.
   */
  refusal(
    decision: RateLimitDecision,
    cost: number,
    context: ExecutionContext,
    decisions: readonly RateLimitDecision[],
  ): Error {
    if (!this.problem) return withoutStack(() => new RateLimitExceededException(decision, cost));
    this.setHeader(context, 'Content-Type', PROBLEM_JSON);
    return withoutStack(() => new RateLimitExceededException(decision, cost, quotaExceeded(decision, cost, decisions)));
  }

  /** The 503; `cause` may be one already (a `leaky_bucket` wait ended by shutdown), made before the format was known. */
  unavailable(cause: unknown, context: ExecutionContext): Error {
    const made = cause instanceof RateLimitUnavailableException;
    if (!this.problem) return made ? cause : new RateLimitUnavailableException(cause);
    this.setHeader(context, 'Content-Type', PROBLEM_JSON);
    return new RateLimitUnavailableException(made ? cause.cause : cause, reducedCapacity());
  }

  /**
   * Watches the Node response under the framework's for 'close': a client that goes away before
   * the answer. Its request ends with a 499 that no one receives and Nest does not log (an
   * `HttpException`).
   */
  departure(context: ExecutionContext): Departure | undefined {
    const raw = nodeResponse(context.getArgByIndex(1));
    if (raw === undefined) return undefined;
    const gone = new AbortController();
    const leave = (): void => gone.abort();
    raw.once('close', leave);
    // a client that left while the store decided: its 'close' has been and gone
    if (raw.destroyed) gone.abort();
    return {
      signal: gone.signal,
      gone: () => withoutStack(() => new HttpException(clientClosed, CLIENT_CLOSED_REQUEST)),
      end: () => void raw.off('close', leave),
    };
  }

  /**
   * Warns once when a request carries `X-Forwarded-For` but the framework did not use it for
   * `req.ip`: behind a proxy the app has not been told to trust, every client would share the
   * proxy's bucket. The module itself never reads the header (a client can write anything in it).
   */
  limitedByIp(request: HttpRequest): void {
    if (this.forwardedForChecked || request.headers['x-forwarded-for'] === undefined) return;
    this.forwardedForChecked = true;
    const address = (request.socket ?? request.raw?.socket)?.remoteAddress;
    if (address !== undefined && request.ip === address) this.logger.warn(forwardedForIgnored(address));
  }

  /** The response finished, or closed first (see `RateLimitContext.ended`). */
  ended(context: ExecutionContext): Promise<boolean> | undefined {
    return responseEnded(context.getArgByIndex(1));
  }
}

/**
 * When a response has been sent (`true` for a final status < 400) or closed first (`false`):
 * at once for one that has already closed (its client went away while the limiter decided).
 * `undefined` for anything but a Node response or a framework's reply around one.
 */
export function responseEnded(response: unknown): Promise<boolean> | undefined {
  const raw = nodeResponse(response);
  if (raw === undefined) return undefined;
  const succeeded = (): boolean => raw.writableFinished && raw.statusCode < 400;
  if (raw.destroyed || raw.writableFinished) return Promise.resolve(succeeded());
  return new Promise((resolve) => {
    const settle = (): void => {
      raw.off('finish', settle).off('close', settle);
      resolve(succeeded());
    };
    raw.once('finish', settle).once('close', settle);
  });
}

/** The Node response under the framework's: Express's response is one, Fastify's reply holds it as `raw`. */
function nodeResponse(response: unknown): ServerResponse | undefined {
  const raw = (response as { raw?: unknown } | undefined)?.raw ?? response;
  return raw instanceof ServerResponse ? raw : undefined;
}
