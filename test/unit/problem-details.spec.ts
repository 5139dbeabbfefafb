import type { ExecutionContext } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { HttpRateLimitContext } from '../../lib/contexts/http.context.js';
import {
  quotaExceeded,
  RateLimitExceededException,
  RateLimitUnavailableException,
  reducedCapacity,
} from '../../lib/rate-limit.exception.js';
import type { RateLimitDecision } from '../../lib/stores/rate-limit-store.interface.js';
import { QUOTA_EXCEEDED, REDUCED_CAPACITY_DOCUMENT } from '../support/problem-documents.js';

/**
 * `errorFormat: 'problem'` without a server: the RFC 9457 bodies, the exceptions that carry them,
 * and the HTTP seam that sets their Content-Type. The e2e spec (problem-json) checks that both
 * adapters send them as set here.
 */

function decision(policy: string, fields: Partial<RateLimitDecision> = {}): RateLimitDecision {
  return {
    allowed: false,
    policy,
    limit: 10,
    remaining: 0,
    resetAfter: 1,
    fullAfter: 10,
    retryAfter: 1,
    delay: 0,
    ...fields,
  };
}

describe('quotaExceeded: the problem document of a 429', () => {
  it("has the draft's type and registered title, the status, the message as detail and the wait", () => {
    const refused = decision('per-org', { retryAfter: 7 });
    expect(quotaExceeded(refused, 1, [refused])).toEqual({
      type: QUOTA_EXCEEDED,
      title: 'Quota Exceeded',
      status: 429,
      detail: 'Rate limit exceeded for policy "per-org". Try again in 7 seconds.',
      'violated-policies': ['per-org'],
      retryAfter: 7,
    });
  });

  // each policy with whether it refuses; the named one is the one that frees up last
  it.each([
    [
      "the named one first, then the other refusing ones in the route's order",
      [
        ['a', true],
        ['b', false],
        ['c', true],
        ['d', true],
      ],
      'c',
      ['c', 'a', 'd'],
    ],
    [
      'the named one alone when the others admit',
      [
        ['a', false],
        ['b', true],
        ['c', false],
      ],
      'b',
      ['b'],
    ],
    [
      'the named one first when it is the last',
      [
        ['a', true],
        ['b', true],
      ],
      'b',
      ['b', 'a'],
    ],
  ] as const)('lists every refusing policy: %s', (_case, policies, named, violated) => {
    const decisions = policies.map(([name, refuses]) => decision(name, { allowed: !refuses }));
    const limiting = decisions.find((d) => d.policy === named)!;
    expect(quotaExceeded(limiting, 1, decisions)['violated-policies']).toEqual(violated);
  });

  it('says a request that can never fit so, with retryAfter null', () => {
    const never = decision('small', { limit: 2, retryAfter: Infinity });
    expect(quotaExceeded(never, 5, [never])).toMatchObject({
      detail: 'Request cost 5 exceeds the capacity 2 of policy "small": it can never be admitted.',
      retryAfter: null,
    });
  });

  it('is a fresh object each time (an app filter may change it)', () => {
    const refused = decision('p');
    const first = quotaExceeded(refused, 1, [refused]);
    expect(quotaExceeded(refused, 1, [refused])).not.toBe(first);
    expect(quotaExceeded(refused, 1, [refused])['violated-policies']).not.toBe(first['violated-policies']);
  });
});

describe('reducedCapacity: the problem document of a 503', () => {
  it('has the temporary-reduced-capacity type, no violated policy and a retry in 1 s', () => {
    expect(reducedCapacity()).toEqual(REDUCED_CAPACITY_DOCUMENT);
  });
});

describe('the exceptions with a body of their own', () => {
  it('RateLimitExceededException answers 429 with the body given, and keeps the decision and cost', () => {
    const refused = decision('p', { retryAfter: 3 });
    const body = quotaExceeded(refused, 2, [refused]);
    const exception = new RateLimitExceededException(refused, 2, body);
    expect(exception.getStatus()).toBe(429);
    expect(exception.getResponse()).toBe(body);
    expect(exception).toMatchObject({ decision: refused, cost: 2 });
    expect(exception.message).toBe('Rate limit exceeded for policy "p". Try again in 3 seconds.');
  });

  it("RateLimitExceededException without one answers Nest's body, as before", () => {
    expect(new RateLimitExceededException(decision('p', { retryAfter: 3 })).getResponse()).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      message: 'Rate limit exceeded for policy "p". Try again in 3 seconds.',
      policy: 'p',
      retryAfter: 3,
    });
  });

  it('RateLimitUnavailableException answers 503 with the body given, and keeps its cause', () => {
    const cause = new Error('ECONNREFUSED');
    const exception = new RateLimitUnavailableException(cause, reducedCapacity());
    expect(exception.getStatus()).toBe(503);
    expect(exception.getResponse()).toEqual(reducedCapacity());
    expect(exception.cause).toBe(cause);
    expect(exception.message).toBe('Rate limiter unavailable. Try again later.');
  });

  it("keeps Nest's message for a body of an app's own without detail", () => {
    expect(new RateLimitUnavailableException(undefined, { reason: 'maintenance' }).message).toBe(
      'Rate Limit Unavailable Exception',
    );
  });
});

describe('HttpRateLimitContext: the form of a refusal', () => {
  /** The seam with an adapter that records the headers set, and an HTTP context for it. */
  function seam(errorFormat?: 'nest' | 'problem') {
    const headers: Array<[string, string]> = [];
    const adapterHost = {
      httpAdapter: { setHeader: (_response: unknown, name: string, value: string) => headers.push([name, value]) },
    };
    const context: ExecutionContext = new ExecutionContextHost([{ headers: {} }, {}]);
    return { http: new HttpRateLimitContext(adapterHost as unknown as HttpAdapterHost, errorFormat), headers, context };
  }

  it("'problem': a 429 with the problem document, and Content-Type: application/problem+json", () => {
    const { http, headers, context } = seam('problem');
    const [a, b] = [decision('a', { retryAfter: 2 }), decision('b', { retryAfter: 9 })];
    const error = http.refusal(b, 1, context, [a, b]) as RateLimitExceededException;
    expect(error).toBeInstanceOf(RateLimitExceededException);
    expect(error.getResponse()).toEqual(quotaExceeded(b, 1, [a, b]));
    expect(headers).toEqual([['Content-Type', 'application/problem+json']]);
  });

  it("'problem': a 503 with the problem document, whether the cause is a store's error or the shutdown's 503", () => {
    const { http, headers, context } = seam('problem');
    const storeError = new Error('ECONNREFUSED');
    const fromStore = http.unavailable(storeError, context) as RateLimitUnavailableException;
    expect(fromStore.getResponse()).toEqual(reducedCapacity());
    expect(fromStore.cause).toBe(storeError);

    const shutdown = new Error('shutting down');
    const fromQueue = http.unavailable(
      new RateLimitUnavailableException(shutdown),
      context,
    ) as RateLimitUnavailableException;
    expect(fromQueue.getResponse()).toEqual(reducedCapacity());
    expect(fromQueue.cause).toBe(shutdown);
    expect(headers).toEqual([
      ['Content-Type', 'application/problem+json'],
      ['Content-Type', 'application/problem+json'],
    ]);
  });

  it.each([undefined, 'nest' as const])("%s: Nest's bodies, and no Content-Type of its own", (errorFormat) => {
    const { http, headers, context } = seam(errorFormat);
    const refused = decision('a', { retryAfter: 2 });
    expect((http.refusal(refused, 1, context, [refused]) as RateLimitExceededException).getResponse()).toMatchObject({
      statusCode: 429,
      policy: 'a',
    });
    const queued = new RateLimitUnavailableException(new Error('shutting down'));
    expect(http.unavailable(queued, context)).toBe(queued);
    expect((http.unavailable(new Error('down'), context) as RateLimitUnavailableException).getResponse()).toMatchObject(
      { statusCode: 503 },
    );
    expect(headers).toEqual([]);
  });
});
