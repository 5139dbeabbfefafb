import { Deadlines, DeadlineQueue } from '../../lib/utils/deadline-queue.js';

/** A promise that never settles, as a call to a store that is gone. */
const never = () => new Promise<never>(() => undefined);

/** When `promise` settled (`performance.now()`), however it did. */
const settledAt = (promise: Promise<unknown>) =>
  promise.then(
    () => performance.now(),
    () => performance.now(),
  );

describe('DeadlineQueue', () => {
  it('expires a call right after its timer, while nothing else happens in the process', async () => {
    // A stopped Redis sends nothing, so the event loop may have nothing to do but wait for its
    // next timer (a client's reconnect timer, here 2 s on). The deadline is checked a step after
    // its timer fires (once the replies are read): that step must follow at once, not wait for
    // the loop's next event (it did, while it was unref()'d: 100 ms and more).
    const deadlines = new DeadlineQueue(20);
    const reconnect = setTimeout(() => undefined, 2_000);
    const control = new Promise<number>((resolve) => setTimeout(() => resolve(performance.now()), 20));
    const expiredAt = await settledAt(deadlines.race(never(), () => new Error('timed out')));
    const timerAt = await control;
    // the two timers fire in the same turn: what lies between is one step of the event loop
    expect(expiredAt - timerAt).toBeLessThan(50);
    clearTimeout(reconnect);
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
