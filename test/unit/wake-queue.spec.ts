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

  it('wakes everyone on close, so no request hangs past shutdown', async () => {
    const woke = jest.fn();
    void queue.wait(10_000).then(woke);
    void queue.wait(20_000).then(woke);
    queue.close();
    await Promise.resolve();
    await Promise.resolve();
    expect(woke).toHaveBeenCalledTimes(2);
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
});
