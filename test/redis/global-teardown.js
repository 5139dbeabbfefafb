import { stopRedisServer } from './redis-server.js';

/** Stops every redis-server the global setup started. */
export default async function globalTeardown() {
  for (const pid of (process.env.TEST_REDIS_PIDS ?? '').split(',').filter(Boolean)) stopRedisServer(Number(pid));
}
