import { decideAll } from '../../lib/algorithms/decide.js';
import { tokenBucket, type TokenBucketState } from '../../lib/algorithms/token-bucket.js';
import { toDecision } from '../../lib/stores/decision.js';
import { TOKEN_BUCKET_CASES } from '../cases/token-bucket.cases.js';

describe('tokenBucket (pure, fixed instants)', () => {
  describe.each(TOKEN_BUCKET_CASES)('$name', ({ limit, steps }) => {
    it('decides every step as the table says', () => {
      let state: TokenBucketState | undefined;
      steps.forEach(({ at, cost = 1, expect: expected }, step) => {
        const verdict = decideAll([{ state, limit, cost }], at, true);
        if (verdict.allowed) state = verdict.next[0] as TokenBucketState;
        const decision = toDecision({ key: 'k', policy: 'p', limit, cost }, verdict.outcomes[0]);
        expect({ step, ...decision }).toMatchObject({ step, ...expected });
      });
    });
  });

  it('keeps tokens within [0, burst] and never lets `at` move backwards', () => {
    const limit = { algorithm: 'token_bucket' as const, rps: 3, burst: 4 };
    let state = tokenBucket.current(undefined, 1_000, limit);
    for (const now of [900, 5_000, 4_000, 5_001, 0]) {
      state = tokenBucket.current(state, now, limit);
      if (tokenBucket.admits(state, limit, 1)) state = tokenBucket.charge(state, limit, 1);
      expect(state.tokens).toBeGreaterThanOrEqual(0);
      expect(state.tokens).toBeLessThanOrEqual(limit.burst);
    }
    expect(state.at).toBe(5_001);
  });

  it('lives no longer than the time to refill fully', () => {
    const limit = { algorithm: 'token_bucket' as const, rps: 10, burst: 50 };
    expect(tokenBucket.ttlMs({ tokens: 0, at: 0 }, limit)).toBe(5_000);
    expect(tokenBucket.ttlMs({ tokens: 49.5, at: 0 }, limit)).toBe(50);
    expect(tokenBucket.ttlMs({ tokens: 50, at: 0 }, limit)).toBe(1);
  });
});

describe('decideAll (several policies, all-or-nothing)', () => {
  const tight = { algorithm: 'token_bucket' as const, rps: 1, burst: 1 };
  const loose = { algorithm: 'token_bucket' as const, rps: 100, burst: 100 };

  it('charges nothing when one policy refuses', () => {
    const drained = { tokens: 0, at: 0 };
    const verdict = decideAll([{ state: drained, limit: tight, cost: 1 }, { state: undefined, limit: loose, cost: 1 }], 0, true);
    expect(verdict.allowed).toBe(false);
    expect(verdict.outcomes.map((o) => [o.allowed, o.remaining])).toEqual([[false, 0], [true, 100]]);
    expect(verdict.next[1]).toEqual({ tokens: 100, at: 0 });
  });

  it('charges every policy when all admit', () => {
    const verdict = decideAll([{ state: undefined, limit: tight, cost: 1 }, { state: undefined, limit: loose, cost: 1 }], 0, true);
    expect(verdict.allowed).toBe(true);
    expect(verdict.next).toEqual([{ tokens: 0, at: 0 }, { tokens: 99, at: 0 }]);
  });

  it('only looks when not charging', () => {
    const verdict = decideAll([{ state: undefined, limit: tight, cost: 1 }], 0, false);
    expect(verdict.outcomes[0]).toMatchObject({ allowed: true, remaining: 1 });
    expect(verdict.next[0]).toEqual({ tokens: 1, at: 0 });
  });
});
