import type { DescribedPolicy } from '../../../lib/headers/rate-limit-headers.js';
import { SharedAnswer, sharedAnswer } from '../../../lib/headers/shared-answer.js';
import type { RateLimitDecision } from '../../../lib/stores/rate-limit-store.interface.js';

/**
 * The headers of an answer several decisions share (a GraphQL HTTP response): whatever order its
 * fields are decided in, the last write lists every policy once and gives `Retry-After` by the
 * one rule of a request's headers. Pure, at a fixed instant.
 */

const NOW_MS = 1_767_225_600_250;

const SLOW: DescribedPolicy = { name: 'slow', rule: { rps: 1 / 3600, burst: 1 } };
const FAST: DescribedPolicy = { name: 'fast', rule: { rps: 1 / 5, burst: 1 } };
const PAGE: DescribedPolicy = { name: 'page', rule: { rps: 1, burst: 100 } };

function decision(policy: string, fields: Partial<RateLimitDecision> = {}): RateLimitDecision {
  return {
    allowed: true,
    policy,
    limit: 1,
    remaining: 0,
    resetAfter: 1,
    fullAfter: 1,
    retryAfter: 0,
    delay: 0,
    ...fields,
  };
}
const refusal = (policy: string, retryAfter: number) =>
  decision(policy, { allowed: false, retryAfter, resetAfter: retryAfter, fullAfter: retryAfter });

/** What the last write of each header left, as a response keeps them (`undefined`: removed). */
function written(
  answer: SharedAnswer,
  families: Parameters<SharedAnswer['write']>[0] = ['ietf', 'x-ratelimit'],
): Record<string, string> {
  const headers: Record<string, string | undefined> = {};
  answer.write(families, NOW_MS, (name, value) => (headers[name] = value));
  return Object.fromEntries(
    Object.entries(headers).filter((entry): entry is [string, string] => entry[1] !== undefined),
  );
}

describe('SharedAnswer', () => {
  it.each([
    ['slow first', [SLOW, FAST]],
    ['fast first', [FAST, SLOW]],
  ])('%s: every policy listed, Retry-After and X-RateLimit-* from the one that frees up last', (_, order) => {
    const answer = new SharedAnswer();
    for (const policy of order) {
      const refused = refusal(policy.name, policy === SLOW ? 3600 : 5);
      answer.add([policy], [refused]).refuse(refused);
    }
    const headers = written(answer);
    expect(headers['Retry-After']).toBe('3600');
    expect(headers['X-RateLimit-Reset']).toBe(String(Math.ceil(NOW_MS / 1000) + 3600));
    expect(headers['RateLimit-Policy'].split(', ').sort()).toEqual(['"fast";q=1;w=5', '"slow";q=1;w=3600']);
    expect(headers.RateLimit.split(', ').sort()).toEqual(['"fast";r=0;t=5', '"slow";r=0;t=3600']);
  });

  it('shows a policy decided under several aliases once, by its tightest decision', () => {
    const answer = new SharedAnswer();
    answer.add([PAGE], [decision('page', { limit: 100, remaining: 99 })]);
    answer.add([PAGE], [decision('page', { limit: 100, remaining: 0 })]);
    answer.add([PAGE], [decision('page', { limit: 100, remaining: 40 })]);
    expect(written(answer)).toEqual({
      'RateLimit-Policy': '"page";q=100;w=100',
      RateLimit: '"page";r=0;t=1',
      'X-RateLimit-Limit': '100',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': String(Math.ceil(NOW_MS / 1000) + 1),
    });
  });

  it.each([
    ['the never-admittable refusal last', [refusal('fast', 5), refusal('page', Infinity)]],
    ['the never-admittable refusal first', [refusal('page', Infinity), refusal('fast', 5)]],
  ])('removes Retry-After once a refusal can never be admitted, %s', (_, refusals) => {
    const answer = new SharedAnswer();
    const seen: Array<string | undefined> = [];
    for (const refused of refusals) {
      answer.add([refused.policy === 'page' ? PAGE : FAST], [refused]).refuse(refused);
      answer.write([], NOW_MS, (name, value) => name === 'Retry-After' && seen.push(value));
    }
    expect(seen.at(-1)).toBeUndefined();
    expect(answer.retryAfter()).toBeUndefined();
  });

  it('says 1 s for an answer the limiter could not give, unless a refusal frees up later', () => {
    const answer = new SharedAnswer();
    expect(written(answer.refuse(undefined), [])).toEqual({ 'Retry-After': '1' });
    answer.add([FAST], [refusal('fast', 5)]).refuse(refusal('fast', 5));
    expect(written(answer, [])).toEqual({ 'Retry-After': '5' });
  });

  it('writes no Retry-After while every decision admits', () => {
    const answer = new SharedAnswer().add([PAGE], [decision('page', { limit: 100, remaining: 7 })]);
    const names: string[] = [];
    answer.write(['ietf'], NOW_MS, (name) => names.push(name));
    expect(names).toEqual(['RateLimit-Policy', 'RateLimit']);
  });

  it('keeps one record per answer, found by the object that names it', () => {
    const [one, other] = [{}, {}];
    expect(sharedAnswer(one)).toBe(sharedAnswer(one));
    expect(sharedAnswer(other)).not.toBe(sharedAnswer(one));
  });
});
