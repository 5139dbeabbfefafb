import type { ExecutionContext } from '@nestjs/common';
import { resolveTier } from '../../lib/keys/tier.js';
import type { LimitedRequest } from '../../lib/keys/identity.js';

/** Where a tiered policy reads a request's tier: a `req.user` field or a function, called once per request. */

const context = {} as ExecutionContext;
/** The module's `timeout`, ms: only reached by a promise that never settles. */
const TIMEOUT = 100;
const withUser = (user: LimitedRequest['user'] | Record<string, unknown>): LimitedRequest => ({ headers: {}, user: user as LimitedRequest['user'] });

describe('resolveTier', () => {
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
    expect(resolveTier('user:plan', withUser(user), context, new Map(), TIMEOUT)).toBe(tier);
  });

  it("names no tier from what an object inherits ('user:constructor', 'user:__proto__')", () => {
    expect(resolveTier('user:constructor', withUser({ id: 1 }), context, new Map(), TIMEOUT)).toBeUndefined();
    expect(resolveTier('user:__proto__', withUser({ id: 1 }), context, new Map(), TIMEOUT)).toBeUndefined();
  });

  it('calls a function once per target, however many policies read it, sync or async', async () => {
    let calls = 0;
    const sync = (ctx: ExecutionContext) => (calls++, ctx === context ? 'pro' : undefined);
    const target = new Map();
    expect(resolveTier(sync, withUser(null), context, target, TIMEOUT)).toBe('pro');
    expect(resolveTier(sync, withUser(null), context, target, TIMEOUT)).toBe('pro');
    expect(calls).toBe(1);
    expect(resolveTier(sync, withUser(null), context, new Map(), TIMEOUT)).toBe('pro');
    expect(calls).toBe(2);

    const async = async () => (calls++, 'enterprise');
    const first = resolveTier(async, withUser(null), context, target, TIMEOUT);
    expect(resolveTier(async, withUser(null), context, target, TIMEOUT)).toBe(first);
    expect(await first).toBe('enterprise');
    expect(calls).toBe(3);
  });

  it('names no tier for a function that throws, rejects or returns no name', async () => {
    expect(resolveTier(() => { throw new Error('no plan'); }, withUser(null), context, new Map(), TIMEOUT)).toBeUndefined();
    expect(await resolveTier(() => Promise.reject(new Error('no plan')), withUser(null), context, new Map(), TIMEOUT)).toBeUndefined();
    expect(await resolveTier(async () => undefined, withUser(null), context, new Map(), TIMEOUT)).toBeUndefined();
    expect(resolveTier(() => 42 as never, withUser(null), context, new Map(), TIMEOUT)).toBe('42');
    expect(resolveTier(() => ({}) as never, withUser(null), context, new Map(), TIMEOUT)).toBeUndefined();
  });

  it('names no tier for a promise that does not settle within the timeout, and none that settles after it', async () => {
    const started = performance.now();
    expect(await resolveTier(() => new Promise<string>(() => undefined), withUser(null), context, new Map(), TIMEOUT)).toBeUndefined();
    expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT - 1);

    let answer!: (tier: string) => void;
    const late = resolveTier(() => new Promise<string>((resolve) => (answer = resolve)), withUser(null), context, new Map(), TIMEOUT);
    await expect(late).resolves.toBeUndefined();
    answer('pro');
    expect(await late).toBeUndefined();
  });
});
