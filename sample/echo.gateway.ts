import { MessageBody, SubscribeMessage, WebSocketGateway, type WsResponse } from '@nestjs/websockets';
import { RateLimit } from 'nestjs-ratelimit';

/**
 * A socket.io gateway on the HTTP server's port (path /socket.io). The module's key chain tells
 * connections apart by the x-api-key header of their handshake, else by their address. A refused
 * message never reaches the handler: the client gets Nest's 'exception' event
 * (`{ status: 'error', statusCode: 429, message, policy, retryAfter }`) and stays connected.
 * NestJS 12 runs the module's global guard on gateways; NestJS 11 would need
 * `@UseGuards(RateLimitGuard)` on the class.
 */
@WebSocketGateway()
export class EchoGateway {
  /** A chat-like pace: 5 messages at once, then 1 a second. The answer is an 'echo' event. */
  @SubscribeMessage('echo')
  @RateLimit({ rps: 1, burst: 5 })
  echo(@MessageBody() text: string): WsResponse<string> {
    return { event: 'echo', data: text };
  }
}
