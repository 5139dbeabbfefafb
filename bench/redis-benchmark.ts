/**
 * redis-benchmark as the comparisons run it (redis-decisions' ceiling, redis-ir's replay): a child
 * process the bench kills should it stop early, with its output and exit code.
 */
import { spawn } from 'node:child_process';
import type { BenchContext } from './comparison.js';

/** Runs `redis-benchmark` with `args`; its exit code and what it printed (stdout and stderr). */
export async function redisBenchmark(
  context: BenchContext,
  args: readonly string[],
): Promise<{ code: number | null; output: string }> {
  const child = spawn('redis-benchmark', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  context.children.add(child);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', resolve);
  }).finally(() => context.children.delete(child));
  return { code, output };
}
