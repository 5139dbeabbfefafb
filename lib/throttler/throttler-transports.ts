import type { ExecutionContext } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import { GraphqlRateLimitContext } from '../contexts/graphql.context.js';
import { WsRateLimitContext } from '../contexts/ws.context.js';

/** What a throttler reads of a request: `ip` (the default tracker), `headers` (`ignoreUserAgents`). */
type Request = Record<string, any>;

/** The answer of a request that has no headers to set (a gateway message, a microservice message). */
const NO_RESPONSE: Record<string, any> = Object.freeze({});
/** A microservice message: no address, no headers; callers share one bucket per route unless `getTracker` tells them apart. */
const MESSAGE: Request = Object.freeze({ headers: Object.freeze({}) });

/** What a refusal is in the transports whose errors are not HTTP exceptions. */
interface RefusalBody {
  status: 'error';
  statusCode: number;
  message: string;
}

/**
 * The throttler guard's view of each transport, so GraphQL resolvers, gateways and
 * microservices are limited without a subclass (@nestjs/throttler reads every context as HTTP):
 * the request the default tracker reads and the response headers go to (our transport seams:
 * a GraphQL operation's HTTP request and response, a gateway connection's address, a message's
 * nothing), headers through the HTTP adapter for a response without `header` or `setHeader`, and
 * a refusal in the transport's own form (a gateway's `exception` event, a microservice's
 * `RpcException`, each `{ status: 'error', statusCode: 429, message }`).
 */
export class ThrottlerTransports {
  private graphql: GraphqlRateLimitContext | undefined;
  private ws: WsRateLimitContext | undefined;
  private WsException: (new (error: object) => Error) | undefined;
  private RpcException: (new (error: object) => Error) | undefined;
  private readonly loading = new Map<string, Promise<void>>();

  constructor(private readonly adapterHost: () => HttpAdapterHost | undefined) {}

  /**
   * Imports what a gateway's or a microservice's context needs, once, when the first of its
   * requests arrives (`@nestjs/websockets` and `@nestjs/microservices` are optional peers).
   */
  load(type: string): Promise<void> | undefined {
    if (type === 'ws' ? this.WsException !== undefined : type === 'rpc' ? this.RpcException !== undefined : true) {
      return undefined;
    }
    let loading = this.loading.get(type);
    if (loading === undefined) this.loading.set(type, (loading = this.importPeers(type)));
    return loading;
  }

  /** The request and response of `context`, as `ThrottlerGuard.getRequestResponse` hands them on. */
  requestResponse(context: ExecutionContext): { req: Request; res: Request } {
    switch (context.getType<string>()) {
      case 'graphql': {
        this.graphql ??= new GraphqlRateLimitContext(this.adapterHost() ?? ({} as HttpAdapterHost));
        return {
          req: this.graphql.request(context) ?? MESSAGE,
          res: this.graphql.sharedAnswer(context) ?? NO_RESPONSE,
        };
      }
      case 'ws':
        return { req: this.ws?.request(context) ?? MESSAGE, res: NO_RESPONSE };
      case 'rpc':
        return { req: MESSAGE, res: NO_RESPONSE };
      default: {
        const http = context.switchToHttp();
        return { req: http.getRequest<Request>(), res: http.getResponse<Request>() };
      }
    }
  }

  /** Sets a header on an HTTP response that has neither `header` nor `setHeader` (a Fastify raw reply wrapper, a proxy object), through the app's HTTP adapter. */
  setHeader(res: Request, name: string, value: string | number): void {
    if (res === NO_RESPONSE || !isHttpResponse(res)) return;
    try {
      this.adapterHost()?.httpAdapter?.setHeader(res, name, String(value));
    } catch {
      // a response the adapter does not know: no headers, as @nestjs/throttler sets none
    }
  }

  /**
   * `error` as `context`'s transport carries it: an HTTP exception (the 429, a storage's 503) in
   * a gateway or a microservice becomes its `{ status: 'error', statusCode, message }` (Nest would
   * answer anything else there with "Internal server error"); any other error stays as it is.
   */
  refusal(context: ExecutionContext, error: unknown): unknown {
    const type = context.getType<string>();
    const Exception = type === 'ws' ? this.WsException : type === 'rpc' ? this.RpcException : undefined;
    const http = error as { getStatus?: unknown; message?: unknown } | undefined;
    if (Exception === undefined || typeof http?.getStatus !== 'function') return error;
    const body: RefusalBody = {
      status: 'error',
      statusCode: (http.getStatus as () => number).call(error),
      message: String(http.message),
    };
    return new Exception(body);
  }

  private async importPeers(type: string): Promise<void> {
    if (type === 'ws') {
      this.ws = await WsRateLimitContext.load();
      this.WsException = (await import('@nestjs/websockets')).WsException;
    } else {
      this.RpcException = (await import('@nestjs/microservices')).RpcException;
    }
  }
}

/** Whether `res` is an HTTP response (Node's, or a framework's reply around one), not a socket or a plain object. */
function isHttpResponse(res: Request): boolean {
  const reply = res as { writeHead?: unknown; raw?: { writeHead?: unknown } } | undefined;
  return typeof reply?.writeHead === 'function' || typeof reply?.raw?.writeHead === 'function';
}
