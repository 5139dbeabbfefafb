import { ServerResponse } from 'node:http';
import { type ExecutionContext, HttpException, Injectable, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { LimitedRequest } from '../keys/identity.js';
import { RateLimitExceededException, RateLimitUnavailableException } from '../rate-limit.exception.js';
import { clientClosedRequest, forwardedForIgnored } from '../rate-limit.messages.js';
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
const clientClosed = { statusCode: CLIENT_CLOSED_REQUEST, error: 'Client Closed Request', message: clientClosedRequest };

/**
 * HTTP requests, on Express and Fastify alike: headers go through Nest's HTTP adapter, a refusal
 * is `RateLimitExceededException` (429), a store that cannot decide under `failMode: 'closed'` is
 * `RateLimitUnavailableException` (503), and a client that closes its connection while its
 * request waits ends it with a 499.
 */
@Injectable()
export class HttpRateLimitContext implements RateLimitContext {
  private readonly logger = new Logger('RateLimitGuard');
  private forwardedForChecked = false;

  constructor(private readonly adapterHost: HttpAdapterHost) {}

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
   * body names the policy and its `retryAfter`.
   */
  refusal(decision: RateLimitDecision, cost: number): Error {
    return withoutStack(() => new RateLimitExceededException(decision, cost));
  }

  unavailable(cause: unknown): Error {
    return cause instanceof RateLimitUnavailableException ? cause : new RateLimitUnavailableException(cause);
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

  /**
   * The final status, read when the response has been sent (an exception filter sets it after the
   * handler throws): < 400 is a success. A response closed before it was sent is no success.
   */
  succeeded(context: ExecutionContext): Promise<boolean> | undefined {
    const raw = nodeResponse(context.getArgByIndex(1));
    if (raw === undefined) return undefined;
    return new Promise((resolve) => {
      const settle = (): void => {
        raw.off('finish', settle).off('close', settle);
        resolve(raw.writableFinished && raw.statusCode < 400);
      };
      raw.once('finish', settle).once('close', settle);
    });
  }
}

/** The Node response under the framework's: Express's response is one, Fastify's reply holds it as `raw`. */
function nodeResponse(response: unknown): ServerResponse | undefined {
  const raw = (response as { raw?: unknown } | undefined)?.raw ?? response;
  return raw instanceof ServerResponse ? raw : undefined;
}
