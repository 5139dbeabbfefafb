import { Controller, Get, type Type } from '@nestjs/common';
import { RateLimit, type RateLimitPolicy } from '../../lib/index.js';

/**
 * A `BadController` whose one handler, `find`, carries `policy`, or whose class does: for tests of
 * the messages start fails with, which name `BadController.find` or `BadController (class)`.
 */
export function controllerWith(policy: unknown, on: 'handler' | 'class' = 'handler'): Type {
  if (on === 'class') {
    @RateLimit(policy as RateLimitPolicy)
    @Controller('bad')
    class BadController {
      @Get()
      find() {
        return [];
      }
    }
    return BadController;
  }
  @Controller('bad')
  class BadController {
    @RateLimit(policy as RateLimitPolicy)
    @Get()
    find() {
      return [];
    }
  }
  return BadController;
}
