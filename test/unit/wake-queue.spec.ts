import { getEventListeners } from 'node:events';
import { jest } from '@jest/globals';
import { WakeQueue } from '../../lib/utils/wake-queue.js';

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
