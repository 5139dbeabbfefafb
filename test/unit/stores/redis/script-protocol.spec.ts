import type { RateLimitRequest } from '../../../../lib/stores/rate-limit-store.interface.js';
import { RateLimitStoreError } from '../../../../lib/stores/rate-limit-store.error.js';
import {
  type CallRequest,
  decodeAnswer,
  decodeDecideReply,
  encodeDecide,
  encodeRefund,
  REPLY_WIDTH,
} from '../../../../lib/stores/redis/script-protocol.js';

const tokens: RateLimitRequest = {
  key: 'rl:a',
  policy: 'a',
  rule: { algorithm: 'token_bucket', rps: 0.5, burst: 10 },
  cost: 1.5,
};
const window: RateLimitRequest = {
  key: 'rl:b',
  policy: 'b',
  rule: { algorithm: 'fixed_window', rps: 2, burst: 4, blockMs: 3_000, limit: 2.5 },
  cost: 1,
};
const log: RateLimitRequest = {
  key: 'rl:c',
  policy: 'c',
  rule: { algorithm: 'sliding_window_log', rps: 1, burst: 5 },
  cost: 1,
};

const charging = (requests: RateLimitRequest[], deadline = ''): CallRequest => ({ requests, charge: true, deadline });

describe("the calls' protocol", () => {
  it('names each key and rule once, and a request only what the call does not take for granted', () => {
    const call = encodeDecide([
      charging([tokens, window], '123'),
      { requests: [window], charge: false, deadline: '456' },
    ]);
    expect(call.keys).toEqual(['rl:a', 'rl:b']);
    expect(call.keyIndexes).toEqual([0, 1, 1]);
    // R, keyed, the call's deadline, plain, requests; the rules; then per request: head (n * 8 + 4 own deadline
    // + 2 peek + 1 costs), its own deadline, per policy key, rule, cost
    expect(call.args).toEqual([
      '2',
      '1',
      '123',
      '0',
      '2',
      ...['token_bucket', '0.5', '10', '0', '', ''],
      ...['fixed_window', '2', '4', '3000', '2.5', ''],
      ...[String(2 * 8 + 1), '1', '1', '1.5', '2', '2', '1'],
      ...[String(1 * 8 + 4 + 2), '456', '2', '2'],
    ]);
  });

  it('sends a call of plain requests (one policy at cost 1, one rule, distinct keys) as its keys alone', () => {
    const other = { ...window, key: 'rl:d' };
    const call = encodeDecide([charging([window], '9'), charging([other], '9')]);
    expect(call.keys).toEqual(['rl:b', 'rl:d']);
    expect(call.args).toEqual(['1', '0', '9', '1', '2', 'fixed_window', '2', '4', '3000', '2.5', '']);
  });

  it('names a key in each plain request where the call repeats keys', () => {
    const call = encodeDecide([charging([window]), charging([window])]);
    expect(call.keys).toEqual(['rl:b']);
    expect(call.args).toEqual(['1', '1', '', '1', '2', 'fixed_window', '2', '4', '3000', '2.5', '', '1', '1']);
  });

  it('sends plain requests of one rule without a block, the log aside, as a flat call: deadline, rule, key indexes if any', () => {
    const plainTokens = { ...tokens, cost: 1 };
    const other = { ...plainTokens, key: 'rl:d' };
    const distinct = encodeDecide([charging([plainTokens], '9'), charging([other], '9')]);
    expect(distinct).toMatchObject({ keys: ['rl:a', 'rl:d'], flat: true });
    expect(distinct.args).toEqual(['9', 'token_bucket', '0.5', '10']);
    const repeated = encodeDecide([charging([plainTokens]), charging([other]), charging([plainTokens])]);
    expect(repeated).toMatchObject({ keys: ['rl:a', 'rl:d'], flat: true });
    expect(repeated.args).toEqual(['', 'token_bucket', '0.5', '10', '1', '2', '1']);
    const gcra = { ...plainTokens, rule: { algorithm: 'gcra' as const, rps: 3, burst: 4 } };
    expect(encodeDecide([charging([gcra])]).args).toEqual(['', 'gcra', '3', '4']);
    // a window's scaled limit follows its rule ('' for none)
    const fixed = { ...plainTokens, rule: { algorithm: 'fixed_window' as const, rps: 2, burst: 4, limit: 2.5 } };
    expect(encodeDecide([charging([fixed]), charging([fixed])]).args).toEqual([
      '',
      'fixed_window',
      '2',
      '4',
      '2.5',
      '1',
      '1',
    ]);
    const counter = { ...plainTokens, rule: { algorithm: 'sliding_window_counter' as const, rps: 2, burst: 4 } };
    expect(encodeDecide([charging([counter])]).args).toEqual(['', 'sliding_window_counter', '2', '4', '']);
    // a block, a debt (a rule that settles), a cost, a peek, two rules or the log take the general call
    const blocking = { ...plainTokens, rule: { ...plainTokens.rule, blockMs: 1_000 } };
    expect(encodeDecide([charging([blocking])]).flat).toBe(false);
    const settling = { ...plainTokens, rule: { ...plainTokens.rule, debt: 10 } };
    expect(encodeDecide([charging([settling])])).toMatchObject({
      flat: false,
      args: ['1', '0', '', '1', '1', 'token_bucket', '0.5', '10', '0', '', '10'],
    });
    expect(encodeDecide([charging([tokens])]).flat).toBe(false);
    expect(encodeDecide([{ requests: [plainTokens], charge: false, deadline: '' }]).flat).toBe(false);
    expect(encodeDecide([charging([plainTokens]), charging([gcra])]).flat).toBe(false);
    expect(encodeDecide([charging([window])]).flat).toBe(false);
    expect(encodeDecide([charging([log])]).flat).toBe(false);
  });

  // the flat call's arguments after the deadline, per algorithm, as `flat.lua.ts` reads them
  it.each([
    ['token_bucket', {}, ['token_bucket', '2', '4']],
    ['leaky_bucket', {}, ['leaky_bucket', '2', '4']],
    ['gcra', {}, ['gcra', '2', '4']],
    ['fixed_window', { limit: 2.5 }, ['fixed_window', '2', '4', '2.5']],
    ['fixed_window', { anchor: 'first-request' }, ['fixed_window', '2', '4', '-4']],
    ['sliding_window_counter', {}, ['sliding_window_counter', '2', '4', '']],
    ['quota', { origin: 1_767_225_600_000 }, ['quota', '2', '4', '', '1767225600000']],
    ['quota', {}, ['quota', '2', '4', '', '0']],
  ] as const)(
    'sends a plain %s call %j as a flat call of its rule, then its flat arguments',
    (algorithm, fields, args) => {
      const plain: RateLimitRequest = {
        key: 'rl:e',
        policy: 'e',
        rule: { algorithm, rps: 2, burst: 4, ...fields },
        cost: 1,
      };
      expect(encodeDecide([charging([plain], '7')])).toMatchObject({ flat: true, args: ['7', ...args] });
    },
  );

  it.each(['sliding_window_log', 'concurrency'] as const)('sends a plain %s call as the general call', (algorithm) => {
    const plain: RateLimitRequest = { key: 'rl:e', policy: 'e', rule: { algorithm, rps: 2, burst: 4 }, cost: 1 };
    expect(encodeDecide([charging([plain])]).flat).toBe(false);
  });

  it('lays out a refund policy after policy, with its signed amount and the time each charge was', () => {
    const settling = { ...tokens, rule: { ...tokens.rule, debt: 20 } };
    expect(encodeRefund([settling, window], [-2.5, 1], [1_000, 2_000])).toEqual({
      keys: ['rl:a', 'rl:b'],
      args: [
        ...['token_bucket', '0.5', '10', '0', '', '20', '-2.5', '1000'],
        ...['fixed_window', '2', '4', '3000', '2.5', '', '1', '2000'],
      ],
    });
  });

  it('derives the figures from the values read, request after request, and takes a log report as the script gave it', () => {
    const calls = [charging([tokens, log]), charging([tokens]), charging([tokens])];
    const call = encodeDecide(calls);
    const logReport = [1, 4, 0, 1_000, 0, 0, 0, 5_000];
    // the bucket held 2 tokens at 4000; at 5000 it holds 2.5: the first request takes 1.5, the
    // second is past its deadline, the third is refused (1 token left)
    const raw = ['2|4000', null, 2, ...logReport, 0, 1, 5_000];
    const { answers, now } = decodeDecideReply(raw, calls, call);
    expect(now).toBe(5_000);
    expect(answers[1]).toBeUndefined();
    expect(answers[0]!.outcomes).toEqual([
      { allowed: true, remaining: 1, retryMs: 0, fullMs: 18_000, nextMs: 2_000, delayMs: 0, blockedMs: 0, at: 5_000 },
      { allowed: true, remaining: 4, retryMs: 0, fullMs: 1_000, nextMs: 0, delayMs: 0, blockedMs: 0, at: 5_000 },
    ]);
    expect(answers[2]!.outcomes).toEqual([
      {
        allowed: false,
        remaining: 1,
        retryMs: 1_000,
        fullMs: 18_000,
        nextMs: 2_000,
        delayMs: 0,
        blockedMs: 0,
        at: 5_000,
      },
    ]);
    expect(logReport).toHaveLength(REPLY_WIDTH);
  });

  it('reads a remaining below 0 as a debt, minus itself: remaining 0 and the debt, absent when none', () => {
    // a refund call's reply: a bucket 3 tokens past empty, then one that owes nothing
    const owing = [0, -3, 4_000, 16_000, 4_000, 0, 0, 5_000];
    const square = [1, 2, 0, 8_000, 0, 0, 0, 5_000];
    const { outcomes, at } = decodeAnswer([...owing, ...square, 5_000], 0, 2);
    expect(outcomes).toStrictEqual([
      {
        allowed: false,
        remaining: 0,
        retryMs: 4_000,
        fullMs: 16_000,
        nextMs: 4_000,
        delayMs: 0,
        blockedMs: 0,
        at: 5_000,
        debt: 3,
      },
      { allowed: true, remaining: 2, retryMs: 0, fullMs: 8_000, nextMs: 0, delayMs: 0, blockedMs: 0, at: 5_000 },
    ]);
    expect(at).toEqual([5_000, 5_000]);
    // a decide reply: the log's report as the script gave it; the bucket's debt derived from the value read
    const settlingLog = { ...log, rule: { ...log.rule, debt: 5 } };
    const settlingTokens = { ...tokens, rule: { ...tokens.rule, debt: 20 } };
    const calls = [charging([settlingTokens, settlingLog])];
    // 3 below empty at 4000, 2.5 at 5000
    const raw = ['-3|4000', null, 1, 0, -2, 2_000, 10_000, 2_000, 0, 0, 5_000, 5_000];
    const [answer] = decodeDecideReply(raw, calls, encodeDecide(calls)).answers;
    expect(answer!.outcomes).toMatchObject([
      { allowed: false, remaining: 0, debt: 3 },
      { allowed: false, remaining: 0, retryMs: 2_000, debt: 2 },
    ]);
  });

  it('fails a reply whose verdict the values do not give', () => {
    const calls = [charging([tokens])];
    const raw = ['0|4000', 2, 5_000];
    expect(() => decodeDecideReply(raw, calls, encodeDecide(calls))).toThrow(RateLimitStoreError);
  });
});
