import { Body, Controller, HttpCode, Post, UnauthorizedException } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

/** The one account of this sample: sign in with this password. */
const DEMO_PASSWORD = 'demo';

/**
 * Sign-in, the classic target of password guessing. Only failed attempts count (a user who gets
 * in gives the attempt back), and the sliding window log is exact: never more than 5 failures per
 * IP in any 15 minutes, with no burst at a window boundary. The attempt after the fifth failure
 * blocks the IP for an hour, the right password included.
 */
@Controller('account')
export class AccountController {
  @Post('login')
  @HttpCode(200)
  @RateLimit({
    name: 'login',
    algorithm: 'sliding_window_log',
    limit: 5,
    window: '15m',
    key: 'ip',
    count: 'failures',
    blockFor: '1h',
  })
  login(@Body() body: { password?: unknown } | undefined): { signedIn: true } {
    if (body?.password !== DEMO_PASSWORD)
      throw new UnauthorizedException('Wrong password (this sample signs in with "demo")');
    return { signedIn: true };
  }
}
