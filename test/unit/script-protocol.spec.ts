import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { appendRequest, decodeDecideReply, encodeRefund, REPLY_WIDTH } from '../../lib/stores/redis/script-protocol.js';

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

/** A policy's numbers in a reply: allowed, remaining, retryMs, fullMs, nextMs, delayMs, blockedMs, at. */
const policyReply = (allowed: number, at: number) => [allowed, 3, 0, 4_000, 0, 0, 0, at];

describe("the scripts' call protocol", () => {
  it('lays out a decide call request after request, each deadline left for the sender', () => {
    const keys: string[] = [];
    const args: string[] = [];
    expect(appendRequest(keys, args, [tokens, window], true)).toBe(2);
    expect(appendRequest(keys, args, [window], false)).toBe(2 + 3 + 2 * 6);
    expect(keys).toEqual(['rl:a', 'rl:b', 'rl:b']);
    // ARGV[2] on: n, charge, deadline; then per policy algorithm, rps, burst, block, limit, cost
    expect(args).toEqual([
      '2',
      '1',
      '',
      'token_bucket',
      '0.5',
      '10',
      '0',
      '',
      '1.5',
      'fixed_window',
      '2',
      '4',
      '3000',
      '2.5',
      '1',
      '1',
      '0',
      '',
      'fixed_window',
      '2',
      '4',
      '3000',
      '2.5',
      '1',
    ]);
  });

  it('lays out a refund policy after policy, with the time each charge was', () => {
    expect(encodeRefund([tokens, window], [1_000, 2_000])).toEqual({
      keys: ['rl:a', 'rl:b'],
      args: ['token_bucket', '0.5', '10', '0', '', '1.5', '1000', 'fixed_window', '2', '4', '3000', '2.5', '1', '2000'],
    });
  });

  it('reads a decide reply: a request past its deadline has no answer, the others their policies', () => {
    const raw = [1, ...policyReply(1, 10), ...policyReply(0, 11), 0, 1, ...policyReply(1, 12), 99];
    const { answers, now } = decodeDecideReply(raw, [2, 1, 1]);
    expect(now).toBe(99);
    expect(answers.map((answer) => answer?.at)).toEqual([[10, 11], undefined, [12]]);
    expect(answers[0]?.outcomes[1]).toEqual({
      allowed: false,
      remaining: 3,
      retryMs: 0,
      fullMs: 4_000,
      nextMs: 0,
      delayMs: 0,
      blockedMs: 0,
      at: 11,
    });
    expect(raw).toHaveLength(1 + 2 * REPLY_WIDTH + 1 + 1 + REPLY_WIDTH + 1);
  });
});
