import type { ExecutionContext } from '@nestjs/common';
import { resolveTier } from '../../../lib/keys/tier.js';
import type { LimitedRequest } from '../../../lib/keys/identity.js';

/** Where a tiered policy reads a request's tier: a `req.user` field or a function, called once per request. */

const context = {} as ExecutionContext;
/** The module's `timeout`, ms: only reached by a promise that never settles. */
const TIMEOUT = 100;
const withUser = (user: LimitedRequest['user'] | Record<string, unknown>): LimitedRequest => ({
  headers: {},
  user: user,
});

describe('resolveTier', () => {
  /** A run of the guard on `request`, its tiers kept on `record` (a fresh one: a request of its own). */
  const run = (request: LimitedRequest, record = {}) => ({ request, context, record });

  it.each([
    [{ id: 1, plan: 'pro' }, 'pro'],
    [{ id: 1, plan: 3 }, '3'],
    [{ id: 1, plan: '' }, undefined],
    [{ id: 1, plan: null }, undefined],
    [{ id: 1, plan: { name: 'pro' } }, undefined],
    [{ id: 1, plan: NaN }, undefined],
    [{ id: 1 }, undefined],
    [null, undefined],
    [undefined, undefined],
  ])("'user:plan' reads req.user.plan: %p names %p", (user, tier) => {
    expect(resolveTier('user:plan', run(withUser(user)), TIMEOUT)).toBe(tier);
  });

  it("names no tier from what an object inherits ('user:constructor', 'user:__proto__')", () => {
    expect(resolveTier('user:constructor', run(withUser({ id: 1 })), TIMEOUT)).toBeUndefined();
    expect(resolveTier('user:__proto__', run(withUser({ id: 1 })), TIMEOUT)).toBeUndefined();
  });

  it('calls a function once per target, however many policies read it, sync or async', async () => {
    let calls = 0;
    const sync = (ctx: ExecutionContext) => (calls++, ctx === context ? 'pro' : undefined);
    const record = {};
    expect(resolveTier(sync, run(withUser(null), record), TIMEOUT)).toBe('pro');
    expect(resolveTier(sync, run(withUser(null), record), TIMEOUT)).toBe('pro');
    expect(calls).toBe(1);
    expect(resolveTier(sync, run(withUser(null)), TIMEOUT)).toBe('pro');
    expect(calls).toBe(2);

    const async = async () => (calls++, 'enterprise');
    const first = resolveTier(async, run(withUser(null), record), TIMEOUT);
    expect(resolveTier(async, run(withUser(null), record), TIMEOUT)).toBe(first);
    expect(await first).toBe('enterprise');
    expect(calls).toBe(3);
  });

  it('names no tier for a function that throws, rejects or returns no name', async () => {
    expect(
      resolveTier(
        () => {
          throw new Error('no plan');
        },
        run(withUser(null)),
        TIMEOUT,
      ),
    ).toBeUndefined();
    expect(await resolveTier(() => Promise.reject(new Error('no plan')), run(withUser(null)), TIMEOUT)).toBeUndefined();
    expect(await resolveTier(async () => undefined, run(withUser(null)), TIMEOUT)).toBeUndefined();
    expect(resolveTier(() => 42 as never, run(withUser(null)), TIMEOUT)).toBe('42');
    expect(resolveTier(() => ({}) as never, run(withUser(null)), TIMEOUT)).toBeUndefined();
  });

  it('names no tier for a promise that does not settle within the timeout, and none that settles after it', async () => {
    const started = performance.now();
    expect(await resolveTier(() => new Promise<string>(() => undefined), run(withUser(null)), TIMEOUT)).toBeUndefined();
    expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT - 1);

    let answer!: (tier: string) => void;
    const late = resolveTier(() => new Promise<string>((resolve) => (answer = resolve)), run(withUser(null)), TIMEOUT);
    await expect(late).resolves.toBeUndefined();
    answer('pro');
    expect(await late).toBeUndefined();
  });
});
