// @ts-check
/**
 * Only for bench/main.ts, which still imports this path: the test servers moved to
 * test/support/redis/. Remove this file once bench/main.ts imports from there.
 */
export { ensureRedisServer, startRedisServer, stopRedisProcesses, stopRedisServer } from '../support/redis/process.js';
