import { type ExecutionContext, Logger } from '@nestjs/common';
import type { WsException } from '@nestjs/websockets';
import type { LimitedRequest } from '../keys/identity.js';
import { refusal } from '../rate-limit.exception.js';
import { clientClosedRequest, gatewayForwardedFor, storeUnavailable } from '../rate-limit.messages.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { withoutStack } from '../utils/without-stack.js';
import type { Departure, RateLimitContext } from './rate-limit-context.js';

/**
 * A gateway's client, the first argument of its handlers: a socket.io `Socket`, which keeps its
 * handshake (the connection's address and the headers and query of the request that opened it),
 * or a ws `WebSocket`, which keeps only its Node socket (`_socket`: ws has no public accessor
 * for the remote address, and keeps nothing of the upgrade request).
 */
interface WsClient {
  handshake?: { address?: string; headers?: LimitedRequest['headers']; query?: Record<string, unknown> };
  _socket?: { remoteAddress?: string };
  /** Where an app's `handleConnection` keeps the user: socket.io's `client.data`, or the client itself. */
  data?: { user?: LimitedRequest['user'] };
  user?: LimitedRequest['user'];
  /** socket.io: the client has gone. */
  disconnected?: boolean;
  /** ws: 2 closing, 3 closed. */
  readyState?: number;
  once(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** ws keeps no headers of the upgrade request: `api-key` and `header:` keys yield nothing there. */
const NO_HEADERS = Object.freeze({});

/** The messages of one connection that wait their turn, and the one listener that watches it for them. */
interface Waiting {
  /** Ends every wait: the connection's listener. */
  readonly leave: () => void;
  /** One per waiting message, aborted when the client goes. */
  readonly messages: Set<AbortController>;
}

/**
 * Watches connections for their clients going away while messages of theirs wait their
 * `leaky_bucket` turn: one listener per connection, however many of its messages wait (a
 * listener per message passed Node's 10 per emitter, and warned, at the 11th queued message), on
 * from when the first starts waiting until the last stops.
 */
class WaitingConnections {
  private readonly connections = new WeakMap<WsClient, Waiting>();

  /** A signal that aborts when `client` emits `event`, and what stops watching for this message. */
  watch(client: WsClient, event: string): { signal: AbortSignal; end: () => void } {
    let waiting = this.connections.get(client);
    if (waiting === undefined) {
      const messages = new Set<AbortController>();
      const leave = (): void => {
        this.connections.delete(client);
        const gone = [...messages];
        messages.clear();
        for (const message of gone) message.abort();
      };
      client.once(event, leave);
      this.connections.set(client, (waiting = { leave, messages }));
    }
    const { leave, messages } = waiting;
    const message = new AbortController();
    messages.add(message);
    return {
      signal: message.signal,
      end: () => {
        // the last message to stop waiting takes the listener with it; after `leave`, none is left to take
        if (!messages.delete(message) || messages.size > 0) return;
        this.connections.delete(client);
        client.off(event, leave);
      },
    };
  }
}

/**
 * WebSocket gateway messages, on socket.io and ws: keys read the connection (its address, the
 * socket.io handshake's headers, `client.data.user ?? client.user`), there are no headers to set,
 * and a refusal is a `WsException`, which Nest's gateway filter sends the client as its
 * `exception` event (socket.io), or as the frame `{"event":"exception","data":{...}}` (ws), with
 * `{ status: 'error', message, statusCode: 429, policy, retryAfter }`, without logging it; the
 * connection stays open. What the guard charges once is the message's argument list (the
 * default target), which Nest makes per message and hands to every guard.
 */
export class WsRateLimitContext implements RateLimitContext {
  private readonly logger = new Logger('RateLimitGuard');
  private forwardedForChecked = false;
  private readonly waiting = new WaitingConnections();

  /** The seam, with `@nestjs/websockets` (an optional peer) imported now: the first gateway message is here. */
  static async load(): Promise<WsRateLimitContext> {
    return new WsRateLimitContext((await import('@nestjs/websockets')).WsException);
  }

  private constructor(private readonly Exception: typeof WsException) {}

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
    return withoutStack(() => new this.Exception({ status: 'error', statusCode: 429, ...refusal(decision, cost) }));
  }

  unavailable(): Error {
    return withoutStack(
      () => new this.Exception({ status: 'error', statusCode: 503, message: storeUnavailable, retryAfter: 1 }),
    );
  }

  /**
   * Watches the connection: socket.io's `disconnect`, ws's `close`, with one listener however
   * many of its messages wait. A message whose client has gone ends with an `exception` that no
   * one receives.
   */
  departure(context: ExecutionContext): Departure {
    const client = context.getArgByIndex<WsClient>(0);
    const gone = () =>
      withoutStack(() => new this.Exception({ status: 'error', statusCode: 499, message: clientClosedRequest }));
    // a client that left while the store decided: its event has been and gone
    if (client.disconnected === true || (client.readyState ?? 0) > 1)
      return { signal: AbortSignal.abort(), gone, end: () => undefined };
    const { signal, end } = this.waiting.watch(client, client.handshake === undefined ? 'close' : 'disconnect');
    return { signal, gone, end };
  }

  /**
   * Warns once when a socket.io handshake carries `X-Forwarded-For`: a gateway has no trusted
   * proxy setting, so its `ip` is always the connection's address, the proxy's behind one.
   */
  limitedByIp(request: LimitedRequest): void {
    if (this.forwardedForChecked || request.headers['x-forwarded-for'] === undefined) return;
    this.forwardedForChecked = true;
    this.logger.warn(gatewayForwardedFor(request.ip ?? 'unknown'));
  }
}
