import { Deadlines, DeadlineQueue } from '../../../lib/utils/deadline-queue.js';

/** A promise that never settles, as a call to a store that is gone. */
const never = () => new Promise<never>(() => undefined);

/** Keeps the event loop busy for `ms`, as a collection pause does. */
function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/** When `promise` settled (`performance.now()`), however it did. */
const settledAt = (promise: Promise<unknown>) =>
  promise.then(
    () => performance.now(),
    () => performance.now(),
  );

describe('DeadlineQueue', () => {
  it('keeps the event loop turning from its timer to the check after the reads, so that check runs at once', async () => {
    // A stopped Redis sends nothing, so the event loop may have nothing to do but wait for its
    // next timer (a client's reconnect timer, 100 ms and more on). The deadline is checked a step
    // after its timer fires, once the replies are read, on an immediate: while only unref()'d
    // immediates are pending, Node lets the poll phase block, and the check waited for that timer.
    const deadlines = new DeadlineQueue(20);
    const expired = deadlines.race(never(), () => new Error('timed out'));
    // Same duration, armed after the queue's timer: both are due after the busy spell, and Node runs
    // them in one timers phase, the queue's first, so this one looks between the queue's timer and
    // its check.
    const pending = new Promise<number>((resolve) =>
      setTimeout(
        () => resolve(process.getActiveResourcesInfo().filter((resource) => resource === 'Immediate').length),
        20,
      ),
    );
    busyFor(50);
    expect(await pending).toBeGreaterThanOrEqual(1);
    await expect(expired).rejects.toThrow('timed out');
    deadlines.close();
  });

  it('takes an answer that came before the deadline, and rejects with the given error after it', async () => {
    const deadlines = new DeadlineQueue(10);
    await expect(deadlines.race(Promise.resolve('answer'), () => new Error('timed out'))).resolves.toBe('answer');
    await expect(deadlines.race(never(), () => new Error('timed out'))).rejects.toThrow('timed out');
    deadlines.close();
  });
});

describe('Deadlines', () => {
  it('bounds each call by its own timeout, counted from when it is raced', async () => {
    const deadlines = new Deadlines();
    const started = performance.now();
    const short = settledAt(deadlines.race(never(), 10, () => new Error('10 ms')));
    const long = settledAt(deadlines.race(never(), 200, () => new Error('200 ms')));
    const [shortAt, longAt] = await Promise.all([short, long]);
    expect(shortAt - started).toBeGreaterThanOrEqual(10 - 1);
    expect(longAt - started).toBeGreaterThanOrEqual(200 - 1);
    expect(shortAt).toBeLessThan(longAt);
    await expect(deadlines.race(never(), 10, () => new Error('10 ms'))).rejects.toThrow('10 ms');
    deadlines.close();
  });
});
