import { Meter, RateLimitBudgetSpent } from '../../../lib/limiter/rate-limit-meter.js';
import type { RateLimitDecision } from '../../../lib/stores/rate-limit-store.interface.js';

/**
 * A request's meter: what its handler counts, what was charged, and when the identity's budget is
 * spent (what was counted past the charge uses up what the bucket held when last asked).
 */

/** A decision that admitted a request, leaving `remaining` in the bucket. */
function admitted(remaining: number): RateLimitDecision {
  return {
    allowed: true,
    policy: 'tpm',
    limit: 1_000,
    remaining,
    resetAfter: 1,
    fullAfter: 60,
    retryAfter: 0,
    delay: 0,
  };
}

describe('Meter', () => {
  it('counts what is added and set, and starts charged its reservation', () => {
    const meter = new Meter('tpm', 100, admitted(500));
    expect([meter.count, meter.charged, meter.touched]).toEqual([0, 100, false]);
    meter.add(30);
    meter.add(20);
    expect([meter.count, meter.touched]).toEqual([50, true]);
    meter.set(40);
    expect(meter.count).toBe(40);
  });

  it('is exhausted once the count passes the reservation by what the bucket held, and aborts its signal', () => {
    const meter = new Meter('tpm', 100, admitted(500));
    const { signal } = meter;
    meter.add(599);
    expect([meter.exhausted, signal.aborted]).toEqual([false, false]);
    meter.add(1);
    expect([meter.exhausted, signal.aborted]).toEqual([true, true]);
    expect(signal.reason).toBeInstanceOf(RateLimitBudgetSpent);
    expect((signal.reason as RateLimitBudgetSpent).policy).toBe('tpm');
  });

  it('hands out an aborted signal when asked after the budget was spent', () => {
    const meter = new Meter('tpm', 0, admitted(10));
    meter.set(10);
    expect(meter.signal.aborted).toBe(true);
  });

  it('counts from what a settle charged and what the bucket held after it', () => {
    const meter = new Meter('tpm', 100, admitted(500));
    meter.add(300);
    // an interval settle charged 300 in all; others took some meanwhile: 50 left
    meter.settledAt(300, admitted(50));
    expect([meter.charged, meter.exhausted]).toEqual([300, false]);
    meter.add(49);
    expect(meter.exhausted).toBe(false);
    meter.add(1);
    expect(meter.exhausted).toBe(true);
  });

  it('is exhausted when a settle finds the bucket in debt, and stays so', () => {
    const meter = new Meter('tpm', 100, admitted(500));
    meter.settledAt(100, { ...admitted(0), allowed: false });
    expect(meter.exhausted).toBe(true);
    meter.settledAt(100, admitted(900));
    expect(meter.exhausted).toBe(true);
  });

  it('keeps its figures when a settle could not say how the bucket stands', () => {
    const meter = new Meter('tpm', 100, admitted(500));
    meter.add(200);
    meter.settledAt(200, undefined);
    expect([meter.charged, meter.exhausted]).toEqual([200, false]);
  });

  it.each([[-1], [NaN], [Infinity]])('refuses an amount of %p', (n) => {
    const meter = new Meter('tpm', 1, admitted(5));
    expect(() => meter.add(n)).toThrow(RangeError);
    expect(() => meter.set(n)).toThrow(RangeError);
    expect(meter.count).toBe(0);
  });
});
