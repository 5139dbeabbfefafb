import { Controller, Get } from '@nestjs/common';
import { SkipRateLimit } from 'nestjs-ratelimit';

/** Load balancers and orchestrators poll this often; limiting it would take healthy instances out. */
@Controller('health')
@SkipRateLimit()
export class HealthController {
  @Get()
  check(): { status: 'ok' } {
    return { status: 'ok' };
  }
}
