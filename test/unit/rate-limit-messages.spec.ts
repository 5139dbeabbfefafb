import { ioredisMissing } from '../../lib/rate-limit.messages.js';

describe('a message that shows the redis option', () => {
  it.each([
    ['a URL', 'redis://app:secret@cache:6379/0', '"redis://***@cache:6379/0"'],
    ['ioredis options', { host: 'cache', password: 'secret' }, '{"host":"cache","password":"***"}'],
    ['a URL without credentials', 'redis://cache:6379', '"redis://cache:6379"'],
  ])('shows %s without its password', (_kind, redis, shown) => {
    expect(ioredisMissing(redis)).toBe(
      `Invalid RateLimitModule option "redis": needs the "ioredis" package: npm install ioredis, got ${shown}`,
    );
  });
});
