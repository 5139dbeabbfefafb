import { getEventListeners } from 'node:events';
import { jest } from '@jest/globals';
import { ManualClock } from '../../../lib/testing/manual-clock.js';
import { WakeQueue } from '../../../lib/utils/wake-queue.js';

describe('WakeQueue', () => {
  let queue: WakeQueue;
  beforeEach(() => {
    jest.useFakeTimers();
    queue = new WakeQueue();
  });
  afterEach(() => {
    queue.close();
    jest.useRealTimers();
  });

  it('wakes each sleeper at its time, in order, with one timer for all of them', async () => {
    const woke: number[] = [];
    for (const ms of [300, 100, 400, 0, 200, 100]) void queue.wait(ms).then(() => woke.push(ms));
    await Promise.resolve();
    expect(woke).toEqual([0]);
    expect(jest.getTimerCount()).toBe(1);

    await jest.advanceTimersByTimeAsync(99);
    expect(woke).toEqual([0]);
    await jest.advanceTimersByTimeAsync(1);
    expect(woke).toEqual([0, 100, 100]);
    expect(jest.getTimerCount()).toBe(1);
    await jest.advanceTimersByTimeAsync(300);
    expect(woke).toEqual([0, 100, 100, 200, 300, 400]);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('re-arms for an earlier sleeper that arrives later', async () => {
    const woke: string[] = [];
    void queue.wait(500).then(() => woke.push('late'));
    void queue.wait(50).then(() => woke.push('early'));
    expect(jest.getTimerCount()).toBe(1);
    await jest.advanceTimersByTimeAsync(50);
    expect(woke).toEqual(['early']);
    await jest.advanceTimersByTimeAsync(450);
    expect(woke).toEqual(['early', 'late']);
  });

  it('ends every wait on close, as not its turn (false), so no request hangs past shutdown', async () => {
    const woke = jest.fn();
    void queue.wait(10_000).then(woke);
    void queue.wait(20_000).then(woke);
    queue.close();
    await Promise.resolve();
    await Promise.resolve();
    expect(woke.mock.calls).toEqual([[false], [false]]);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('waits longer than one Node timer can (2^31 - 1 ms) without waking early', async () => {
    let woke = false;
    void queue.wait(30 * 86_400_000).then(() => (woke = true)); // a leaky_bucket queue may be 30 days long
    await jest.advanceTimersByTimeAsync(2 ** 31);
    expect(woke).toBe(false);
    await jest.advanceTimersByTimeAsync(30 * 86_400_000 - 2 ** 31);
    expect(woke).toBe(true);
  });

  it('ends a wait whose signal aborts at once (false), and the others still wake on time', async () => {
    const woke: [string, boolean][] = [];
    const gone = new AbortController();
    void queue.wait(100).then((turn) => woke.push(['first', turn]));
    void queue.wait(200, gone.signal).then((turn) => woke.push(['gone', turn]));
    void queue.wait(300).then((turn) => woke.push(['third', turn]));
    await jest.advanceTimersByTimeAsync(50);
    gone.abort();
    await Promise.resolve();
    expect(woke).toEqual([['gone', false]]);
    await jest.advanceTimersByTimeAsync(250);
    expect(woke).toEqual([
      ['gone', false],
      ['first', true],
      ['third', true],
    ]);
    expect(queue.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('takes a cancelled sleeper out of the heap at once, and clears the timer when none is left', async () => {
    const gone = new AbortController();
    const turn = queue.wait(3_600_000, gone.signal);
    expect(queue.size).toBe(1);
    expect(jest.getTimerCount()).toBe(1);
    gone.abort();
    expect(queue.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0);
    await expect(turn).resolves.toBe(false);
  });

  it('removes its abort listener when a sleeper wakes on time (a long-lived signal does not collect them)', async () => {
    const signal = new AbortController().signal;
    const turns = [queue.wait(10, signal), queue.wait(20, signal), queue.wait(30, signal)];
    expect(getEventListeners(signal, 'abort')).toHaveLength(3);
    await jest.advanceTimersByTimeAsync(20);
    expect(getEventListeners(signal, 'abort')).toHaveLength(1);
    await jest.advanceTimersByTimeAsync(10);
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
    await expect(Promise.all(turns)).resolves.toEqual([true, true, true]);
  });

  it('answers false at once, with no timer, for a signal that aborted before the wait', async () => {
    const gone = new AbortController();
    gone.abort();
    await expect(queue.wait(1_000, gone.signal)).resolves.toBe(false);
    expect(queue.size).toBe(0);
    expect(jest.getTimerCount()).toBe(0);
  });

  it('keeps the order of the others whichever sleepers are cancelled (removal from the middle of the heap)', async () => {
    // 200 distinct times (7919 is prime to 1000); every third sleeper is cancelled
    const times = Array.from({ length: 200 }, (_, i) => ((i * 7919) % 1000) + 10);
    const woke: number[] = [];
    const ended: number[] = [];
    const controllers = times.map((ms) => {
      const controller = new AbortController();
      void queue.wait(ms, controller.signal).then((turn) => (turn ? woke : ended).push(ms));
      return controller;
    });
    const cancelled = times.filter((_, i) => i % 3 === 0);
    for (let i = 0; i < times.length; i += 3) controllers[i].abort();
    expect(queue.size).toBe(times.length - cancelled.length);
    await jest.advanceTimersByTimeAsync(1_010);
    expect(ended).toEqual(cancelled);
    expect(woke).toEqual(times.filter((_, i) => i % 3 !== 0).sort((a, b) => a - b));
  });

  it('after close, every new wait ends at once (false): nothing waits past shutdown', async () => {
    queue.close();
    await expect(queue.wait(10_000)).resolves.toBe(false);
    await expect(queue.wait(0)).resolves.toBe(true);
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe('WakeQueue on a clock of its own', () => {
  afterEach(() => {
    jest.useRealTimers();
  });

  /** A clock moved by hand, as `ManualClock` is, that counts who listens to it. */
  function handClock(start = 1_000_000) {
    const clock = new ManualClock(start);
    let listening = 0;
    const onChange = clock.onChange.bind(clock);
    clock.onChange = (listener) => {
      listening++;
      const stop = onChange(listener);
      return () => {
        listening--;
        stop();
      };
    };
    return { clock, listening: () => listening };
  }

  it('on a clock moved by hand, wakes each sleeper when a move passes its time, with no timer', async () => {
    jest.useFakeTimers();
    const { clock, listening } = handClock();
    const queue = new WakeQueue(clock);
    const woke: number[] = [];
    for (const ms of [3_000, 1_000, 2_000]) void queue.wait(ms).then(() => woke.push(ms));
    expect(jest.getTimerCount()).toBe(0);
    expect(listening()).toBe(1);

    // real time alone wakes no one
    await jest.advanceTimersByTimeAsync(10_000);
    expect(woke).toEqual([]);
    clock.advance(999);
    await Promise.resolve();
    expect(woke).toEqual([]);
    clock.advance('1ms');
    await Promise.resolve();
    expect(woke).toEqual([1_000]);
    clock.set(clock.now() + 5_000);
    await Promise.resolve();
    expect(woke).toEqual([1_000, 2_000, 3_000]);
    // it listens only while someone sleeps
    expect(listening()).toBe(0);
    queue.close();
  });

  it('on a clock moved by hand, stops listening when the last sleeper is cancelled, and at close', async () => {
    const { clock, listening } = handClock();
    const queue = new WakeQueue(clock);
    const gone = new AbortController();
    const turn = queue.wait(5_000, gone.signal);
    expect(listening()).toBe(1);
    gone.abort();
    await expect(turn).resolves.toBe(false);
    expect(listening()).toBe(0);

    const closed = queue.wait(5_000);
    expect(listening()).toBe(1);
    queue.close();
    await expect(closed).resolves.toBe(false);
    expect(listening()).toBe(0);
    clock.advance('10s');
  });

  it('on a clock moved by hand, a clock set back keeps its sleepers until it passes their time again', async () => {
    const clock = new ManualClock(1_000_000);
    const queue = new WakeQueue(clock);
    let woke = false;
    void queue.wait(1_000).then(() => (woke = true));
    clock.set(0);
    clock.advance(1_000_500);
    await Promise.resolve();
    expect(woke).toBe(false);
    clock.advance(500);
    await Promise.resolve();
    expect(woke).toBe(true);
    queue.close();
  });

  it('on a clock that does not say when it moves, times the wait on real time and lets the clock say who wakes', async () => {
    jest.useFakeTimers();
    let now = 5_000;
    const queue = new WakeQueue({ now: () => now });
    const woke: number[] = [];
    void queue.wait(100).then(() => woke.push(100));
    void queue.wait(300).then(() => woke.push(300));
    expect(jest.getTimerCount()).toBe(1);
    // the clock ran ahead of real time: the first firing wakes both
    now += 300;
    await jest.advanceTimersByTimeAsync(100);
    expect(woke).toEqual([100, 300]);
    expect(jest.getTimerCount()).toBe(0);
    queue.close();
  });

  it('looks at a clock that stands still (and does not say when it moves) once a second, not once a millisecond', async () => {
    jest.useFakeTimers();
    let now = 5_000;
    const read = jest.fn(() => now);
    const queue = new WakeQueue({ now: read });
    let woke = false;
    void queue.wait(1).then(() => (woke = true));
    await jest.advanceTimersByTimeAsync(10_000);
    expect(woke).toBe(false);
    // armed, then one look when the first 1 ms timer fires, then about one a second
    expect(read.mock.calls.length).toBeLessThanOrEqual(2 + 2 * 11);
    now += 1;
    await jest.advanceTimersByTimeAsync(1_000);
    expect(woke).toBe(true);
    expect(jest.getTimerCount()).toBe(0);
    queue.close();
  });
});
