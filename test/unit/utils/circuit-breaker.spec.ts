import { CircuitBreaker } from '../../../lib/utils/circuit-breaker.js';

describe('CircuitBreaker (clock pinned)', () => {
  let now = 0;
  const breaker = () => new CircuitBreaker({ threshold: 3, probeAfterMs: 250, now: () => now });
  beforeEach(() => (now = 1_000));

  it('lets every call through until 3 failures in a row, and a success in between starts the count again', () => {
    const b = breaker();
    expect(b.failed()).toBe(false);
    expect(b.failed()).toBe(false);
    expect(b.succeeded()).toBe(false);
    expect(b.failed()).toBe(false);
    expect(b.failed()).toBe(false);
    expect(b.allow()).toBe(true);
    expect(b.failed()).toBe(true); // the third in a row opens it
    expect(b.isOpen).toBe(true);
    expect(b.allow()).toBe(false);
  });

  it('when open, lets one probe through every 250 ms, and the probe decides', () => {
    const b = breaker();
    for (let i = 0; i < 3; i++) b.failed();
    now += 249;
    expect(b.allow()).toBe(false);
    now += 1;
    expect(b.allow()).toBe(true); // the probe
    expect(b.allow()).toBe(false); // only one at a time
    expect(b.failed()).toBe(false); // still open, probe timer starts again
    now += 249;
    expect(b.allow()).toBe(false);
    now += 1;
    expect(b.allow()).toBe(true);
    expect(b.succeeded()).toBe(true); // closed
    expect(b.isOpen).toBe(false);
    expect(b.allow()).toBe(true);
    expect(b.allow()).toBe(true);
  });

  it('needs 3 new failures to open again after closing', () => {
    const b = breaker();
    for (let i = 0; i < 3; i++) b.failed();
    now += 250;
    b.allow();
    b.succeeded();
    expect(b.failed()).toBe(false);
    expect(b.failed()).toBe(false);
    expect(b.allow()).toBe(true);
  });
});
