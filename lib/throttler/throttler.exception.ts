import { HttpException, HttpStatus } from '@nestjs/common';
import { throttlerMessage } from '../rate-limit.messages.js';

export { throttlerMessage };

/**
 * A refused request: 429, body `{ "statusCode": 429, "message": "ThrottlerException: Too Many Requests" }`.
 *
 * @example throw new ThrottlerException('Slow down');
 */
export class ThrottlerException extends HttpException {
  constructor(message?: string) {
    super(`${message || throttlerMessage}`, HttpStatus.TOO_MANY_REQUESTS);
  }
}
