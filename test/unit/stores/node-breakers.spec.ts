import {
  BREAKER_PROBE_MS,
  BREAKER_THRESHOLD,
  NodeBreakers,
  ONE_NODE,
  OUTAGE_OVER_MS,
} from '../../../lib/stores/node-breakers.js';
import { RateLimitStoreError, storeTimeout } from '../../../lib/stores/rate-limit-store.error.js';

const [A, B] = [['10.0.0.1:7000'], ['10.0.0.2:7000']];
const BOTH = [...A, ...B];

describe('NodeBreakers (clock pinned)', () => {
  let now = 0;
  let told: string[];
  const breakers = () =>
    new NodeBreakers(
      {
        transition: (state) => told.push(state),
        outage: (failure, node) => told.push(`outage ${node}: ${failure.message}`),
        over: (node) => told.push(`over ${node}`),
      },
      () => now,
    );
  const failOn = (b: NodeBreakers, nodes: readonly string[], times = BREAKER_THRESHOLD, node?: string) => {
    for (let i = 0; i < times; i++) b.failed(nodes, new RateLimitStoreError('down', { reason: 'timeout', node }));
  };
  beforeEach(() => {
    now = 1_000;
    told = [];
  });

  it("a server's failures stop its own calls, and no other's", () => {
    const b = breakers();
    failOn(b, A);
    expect(b.allow(A)).toBe(false);
    expect(b.allow(B)).toBe(true);
    expect(told).toEqual(['open', `outage ${A[0]}: down`]);
  });

  it("a failure that names its server counts there, not on the call's other servers", () => {
    const b = breakers();
    failOn(b, BOTH, BREAKER_THRESHOLD, B[0]);
    expect(b.allow(A)).toBe(true);
    expect(b.allow(B)).toBe(false);
    failOn(b, ONE_NODE, BREAKER_THRESHOLD, undefined);
    expect(b.allow(ONE_NODE)).toBe(false);
  });

  it('a call on several servers goes when each lets it, and takes a probe of each only then', () => {
    const b = breakers();
    failOn(b, A);
    now += BREAKER_PROBE_MS - 1;
    failOn(b, B);
    now += 1;
    // A's probe is due, B's is not: the call does not go, and A's probe is still there
    expect(b.allow(BOTH)).toBe(false);
    expect(b.allow(A)).toBe(true);
    expect(b.allow(A)).toBe(false);
    b.failed(A, storeTimeout(100, A[0]));
    now += BREAKER_PROBE_MS;
    expect(b.allow(BOTH)).toBe(true);
    expect(b.allow(A)).toBe(false);
    expect(b.allow(B)).toBe(false);
    b.succeeded(BOTH);
    expect(b.allow(A)).toBe(true);
    expect(b.allow(B)).toBe(true);
  });

  it('an outage flapping open and closed is told once, and over once its breaker stays closed a while', () => {
    const b = breakers();
    for (let flap = 0; flap < 5; flap++) {
      failOn(b, A);
      now += BREAKER_PROBE_MS;
      expect(b.allow(A)).toBe(true);
      b.succeeded(A);
      now += OUTAGE_OVER_MS / 2;
      b.succeeded(A);
    }
    expect(told.filter((t) => t.startsWith('outage'))).toHaveLength(1);
    expect(told.filter((t) => t === 'open')).toHaveLength(5);
    expect(told.filter((t) => t === 'closed')).toHaveLength(5);
    expect(told).not.toContain(`over ${A[0]}`);
    now += OUTAGE_OVER_MS / 2;
    b.succeeded(A);
    b.succeeded(A);
    expect(told.filter((t) => t.startsWith('over'))).toEqual([`over ${A[0]}`]);
    // the next outage is told again
    failOn(b, A);
    expect(told.filter((t) => t.startsWith('outage'))).toHaveLength(2);
  });
});
