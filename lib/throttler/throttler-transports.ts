import type { ExecutionContext } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { RateLimitContext } from '../contexts/rate-limit-context.js';
import { RateLimitContexts } from '../contexts/rate-limit-contexts.js';

/** What a throttler reads of a request: `ip` (the default tracker), `headers` (`ignoreUserAgents`). */
type Request = Record<string, any>;

/**
 * The seams of the throttler guard (`ThrottlerModule` provides them): every kind of context, as
 * @nestjs/throttler's guard runs on any, whatever `RateLimitModule`'s `contexts` says.
 */
export function throttlerContexts(adapterHost: HttpAdapterHost): RateLimitContexts {
  return new RateLimitContexts({ contexts: ['http', 'graphql', 'ws', 'rpc'] }, adapterHost);
}

/** The answer of a request that has no headers to set (a gateway message, a microservice message). */
const NO_RESPONSE: Record<string, any> = Object.freeze({});
/** A request its seam has none for (a GraphQL subscription): one bucket per route unless `getTracker` tells callers apart. */
const MESSAGE: Request = Object.freeze({ headers: Object.freeze({}) });

/** What a refusal is in the transports whose errors are not HTTP exceptions. */
interface RefusalBody {
  status: 'error';
  statusCode: number;
  message: string;
}

/** A transport's exception, made from the body its caller receives. */
type TransportException = new (error: object) => Error;

/**
 * The throttler guard's view of each transport, so GraphQL resolvers, gateways and
 * microservices are limited without a subclass (@nestjs/throttler reads every context as HTTP).
 * It reaches each through the seam `RateLimitContexts` keeps for its kind: the request the
 * default tracker reads (a GraphQL operation's HTTP request, a gateway connection's address, a
 * message's nothing), the answer headers go to (the operation's HTTP response) and, for a
 * response without `header` or `setHeader`, the seam's own way to set them (the app's HTTP
 * adapter). A refusal is an HTTP exception (NT's `ThrottlerException`, a storage's 503) in the
 * transport's own form: a gateway's `exception` event, a microservice's `RpcException`, each
 * `{ status: 'error', statusCode, message }`.
 */
export class ThrottlerTransports {
  /** The seams, when the guard was made without `ThrottlerModule`'s (by hand, in a test). */
  private ownContexts: RateLimitContexts | undefined;
  private readonly exceptions = new Map<string, TransportException>();
  private readonly ready = new Set<string>();
  private readonly loading = new Map<string, Promise<void>>();

  constructor(private readonly contexts: () => RateLimitContexts | undefined) {}

  /**
   * Makes the seam of a kind of context, once, when its first request arrives: those of gateways
   * and microservices import `@nestjs/websockets` and `@nestjs/microservices` (optional peers),
   * which also give the exception a refusal is carried in. `undefined` once it is made.
   */
  load(type: string): Promise<void> | undefined {
    if (this.ready.has(type)) return undefined;
    let loading = this.loading.get(type);
    if (loading === undefined) this.loading.set(type, (loading = this.prepare(type)));
    return loading;
  }

  /**
   * The request and response of `context`, as `ThrottlerGuard.getRequestResponse` hands them on.
   * HTTP: the handler's (NT's). Another kind: its seam's request, and the answer its decisions
   * share (GraphQL's HTTP response), else one with no headers.
   */
  requestResponse(context: ExecutionContext): { req: Request; res: Request } {
    const type = context.getType<string>();
    const seam = this.seams().for(type);
    if (type === 'http' || seam === undefined) {
      const http = context.switchToHttp();
      return { req: http.getRequest<Request>(), res: this.writable(http.getResponse<Request>(), seam, context) };
    }
    const answer = seam.sharedAnswer?.(context) as Request | undefined;
    return {
      req: seam.request(context) ?? MESSAGE,
      res: answer === undefined ? NO_RESPONSE : this.writable(answer, seam, context),
    };
  }

  /**
   * `error` as `context`'s transport carries it: an HTTP exception (the 429, a storage's 503) in
   * a gateway or a microservice becomes its `{ status: 'error', statusCode, message }` (Nest would
   * answer anything else there with "Internal server error"); any other error stays as it is.
   */
  refusal(context: ExecutionContext, error: unknown): unknown {
    const Exception = this.exceptions.get(context.getType<string>());
    const http = error as { getStatus?: unknown; message?: unknown } | undefined;
    if (Exception === undefined || typeof http?.getStatus !== 'function') return error;
    const body: RefusalBody = {
      status: 'error',
      statusCode: (http.getStatus as () => number).call(error),
      message: String(http.message),
    };
    return new Exception(body);
  }

  private async prepare(type: string): Promise<void> {
    await this.seams().load(type);
    // the seam has imported the peer: this import is its module, already loaded
    if (type === 'ws') this.exceptions.set(type, (await import('@nestjs/websockets')).WsException);
    if (type === 'rpc') this.exceptions.set(type, (await import('@nestjs/microservices')).RpcException);
    this.ready.add(type);
  }

  private seams(): RateLimitContexts {
    const given = this.contexts();
    if (given !== undefined) return given;
    this.ownContexts ??= throttlerContexts(new HttpAdapterHost());
    return this.ownContexts;
  }

  /**
   * `res` as NT's guard writes to it: itself when it has `header` or `setHeader`; else (a response
   * of an HTTP adapter other than Express's and Fastify's: nestjs/throttler#2206) a stand-in whose
   * `header` sets the header through the transport's seam, that is, the app's HTTP adapter.
   */
  private writable(res: Request, seam: RateLimitContext | undefined, context: ExecutionContext): Request {
    const response = res as { header?: unknown; setHeader?: unknown } | undefined;
    if (seam === undefined || typeof response?.header === 'function' || typeof response?.setHeader === 'function') {
      return res;
    }
    return {
      header: (name: string, value: string | number) => {
        try {
          seam.setHeader(context, name, String(value));
        } catch {
          // a response the adapter does not know: no headers, as @nestjs/throttler sets none
        }
      },
    };
  }
}
