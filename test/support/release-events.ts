import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { RateLimitReleaseEvent } from '../../lib/index.js';

/**
 * The next release (of a slot) or settle (of a real cost) the store failed, as the engine tells
 * it on `nestjs-ratelimit:release` (outcome `failed`), before it tries again.
 */
export function nextFailedRelease(): Promise<RateLimitReleaseEvent> {
  return new Promise((resolve) => {
    const heard = (message: unknown): void => {
      const event = message as RateLimitReleaseEvent;
      if (event.outcome !== 'failed') return;
      unsubscribe('nestjs-ratelimit:release', heard);
      resolve(event);
    };
    subscribe('nestjs-ratelimit:release', heard);
  });
}
