import { DeadlineQueue } from '../../lib/utils/deadline-queue.js';
import { useTestRedis } from '../support/redis/test-redis.js';

const redis = useTestRedis();

/** Keeps the event loop busy for `ms`, as a collection pause or a CPU-bound request does. */
function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/**
 * The store's timeout measures the store, not the app: an answer that came while the app's own
 * event loop was busy past the deadline is taken, since Node runs expired timers before it reads
 * sockets. (Before the deadline was checked after the reads, such calls all timed out: a 503
 * under failMode 'closed' for a pause of the app.)
 */
describe('DeadlineQueue with a real Redis', () => {
  it('takes an answer that arrived while the event loop was busy past the deadline', async () => {
    const deadlines = new DeadlineQueue(20);
    const answers = Array.from({ length: 5 }, () => deadlines.race(redis().ping(), () => new Error('timed out')));
    busyFor(200);
    await expect(Promise.all(answers)).resolves.toEqual(['PONG', 'PONG', 'PONG', 'PONG', 'PONG']);
    deadlines.close();
  });

  it('still times out a call with no answer', async () => {
    const deadlines = new DeadlineQueue(20);
    const blocked = redis().duplicate();
    const started = performance.now();
    // BLPOP on a key no one pushes to: no answer for 1 s
    const never = deadlines.race(blocked.blpop(`deadline-spec-${process.pid}`, 1), () => new Error('timed out'));
    await expect(never).rejects.toThrow('timed out');
    expect(performance.now() - started).toBeLessThan(900);
    deadlines.close();
    blocked.disconnect();
  });
});
