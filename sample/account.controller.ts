import { Controller, HttpCode, Post } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

/**
 * Sign-in, the classic target of password guessing. The sliding window log is exact: never more
 * than 5 attempts per IP in any 15 minutes, with no burst at a window boundary. It stores one
 * entry per attempt, which is cheap at a limit of 5.
 */
@Controller('account')
export class AccountController {
  @Post('login')
  @HttpCode(200)
  @RateLimit({ name: 'login', algorithm: 'sliding_window_log', limit: 5, window: '15m', key: 'ip' })
  login(): { signedIn: false; reason: string } {
    return { signedIn: false, reason: 'this sample has no users' };
  }
}
