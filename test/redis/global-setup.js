import { ensureRedisServer, startRedisServer } from './redis-server.js';

/** Starts the redis-server the suites share; its URL reaches the test workers through the environment. */
export default async function globalSetup() {
  ensureRedisServer();
  const server = await startRedisServer();
  process.env.TEST_REDIS_URL = server.url;
  process.env.TEST_REDIS_PIDS = String(server.pid);
}
