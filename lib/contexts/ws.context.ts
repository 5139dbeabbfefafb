import type { ExecutionContext } from '@nestjs/common';
import { WsException } from '@nestjs/websockets';
import type { LimitedRequest } from '../keys/identity.js';
import { refusal } from '../rate-limit.exception.js';
import { clientClosedRequest, storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { Departure, RateLimitContext } from './rate-limit-context.js';

/** A gateway's client: a socket.io `Socket` (with its handshake) or a ws `WebSocket` (with its Node socket). */
interface WsClient {
  handshake?: { address?: string; headers?: LimitedRequest['headers']; query?: Record<string, unknown> };
  _socket?: { remoteAddress?: string };
  data?: { user?: LimitedRequest['user'] };
  user?: LimitedRequest['user'];
  /** socket.io */
  disconnected?: boolean;
  /** ws: 2 closing, 3 closed */
  readyState?: number;
  once(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** ws keeps no headers of the upgrade request. */
const NO_HEADERS = Object.freeze({});

/**
 * WebSocket gateway messages, on socket.io and ws: keys read the connection (its address, the
 * socket.io handshake's headers, `client.data.user ?? client.user`), there are no headers to set,
 * and a refusal is a `WsException`, which Nest answers with its `exception` event
 * (`{ status: 'error', message, statusCode: 429, policy, retryAfter }`) while the connection stays
 * open. The guard runs on a message's arguments, so a global guard and `@UseGuards` charge it once.
 */
export class WsRateLimitContext implements RateLimitContext {
  request(context: ExecutionContext): LimitedRequest {
    const client = context.getArgByIndex<WsClient>(0);
    const handshake = client.handshake;
    return {
      ip: handshake?.address ?? client._socket?.remoteAddress,
      headers: handshake?.headers ?? NO_HEADERS,
      user: client.data?.user ?? client.user,
      query: handshake?.query,
    };
  }

  setHeader(): void {
    // a message has no headers
  }

  refusal(decision: RateLimitDecision, cost: number): Error {
    return withoutStack(() => new WsException({ status: 'error', statusCode: 429, ...refusal(decision, cost) }));
  }

  unavailable(): Error {
    return withoutStack(() => new WsException({ status: 'error', statusCode: 503, message: storeUnavailable, retryAfter: 1 }));
  }

  /** Watches the connection: socket.io's `disconnect`, ws's `close`. */
  departure(context: ExecutionContext): Departure {
    const client = context.getArgByIndex<WsClient>(0);
    const event = client.handshake === undefined ? 'close' : 'disconnect';
    const gone = new AbortController();
    const leave = (): void => gone.abort();
    client.once(event, leave);
    if (client.disconnected === true || (client.readyState ?? 0) > 1) gone.abort();
    return {
      signal: gone.signal,
      gone: () => withoutStack(() => new WsException({ status: 'error', statusCode: 499, message: clientClosedRequest })),
      end: () => void client.off(event, leave),
    };
  }
}
