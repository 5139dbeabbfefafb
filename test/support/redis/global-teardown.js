// @ts-check
import { delimiter } from 'node:path';
import { removeTempDir, stopRedisProcesses } from './process.js';

/** Stops every process the global setup started (TEST_REDIS_PIDS) and removes its temp dirs (TEST_REDIS_DIRS). */
export default async function globalTeardown() {
  await stopRedisProcesses((process.env.TEST_REDIS_PIDS ?? '').split(',').filter(Boolean).map(Number));
  for (const dir of (process.env.TEST_REDIS_DIRS ?? '').split(delimiter).filter(Boolean)) await removeTempDir(dir);
}
