import { jest } from '@jest/globals';
import type { Outcome, Rule } from '../../../../lib/algorithms/algorithm.types.js';
import type { RateLimitRequest } from '../../../../lib/stores/rate-limit-store.interface.js';
import { RefusalGate, type ServerAnswer } from '../../../../lib/stores/refusal-gate/refusal-gate.js';
import { RefusedCache } from '../../../../lib/stores/refusal-gate/refused-cache.js';

/** Two requests, then a refusal for 1,000 s. */
const TIGHT: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 2 };
const ADMITTED: Outcome = {
  allowed: true,
  remaining: 1,
  retryMs: 0,
  fullMs: 1_000,
  nextMs: 0,
  delayMs: 0,
  blockedMs: 0,
};

/**
 * The gate is looked up once per charge: `charge` skips its lookup only for the very array
 * `answer` last had no answer for (the module's `consume` right after its `cached`), and looks up
 * any other. The cache is the real one, its lookups counted.
 */
describe('RefusalGate: one lookup per charge', () => {
  const now = 0;
  const requestsOf = (): RateLimitRequest[] => [{ key: 'rl:gate:tb', policy: 'gate', rule: TIGHT, cost: 1 }];
  const send = (): Promise<ServerAnswer> => Promise.resolve({ outcomes: [ADMITTED], decidedAt: now });
  let lookups: jest.Spied<RefusedCache['lookup']>;
  beforeEach(() => {
    lookups = jest.spyOn(RefusedCache.prototype, 'lookup');
  });
  afterEach(() => jest.restoreAllMocks());

  const cases: Array<[string, (gate: RefusalGate, requests: RateLimitRequest[]) => Promise<unknown>, number]> = [
    ['charge alone', (gate, requests) => gate.charge(requests, send), 1],
    [
      'answer, then charge of the same array',
      (gate, requests) => {
        gate.answer(requests);
        return gate.charge(requests, send);
      },
      1,
    ],
    [
      'answer, then charge of an equal copy',
      (gate, requests) => {
        gate.answer(requests);
        return gate.charge([...requests], send);
      },
      2,
    ],
    [
      'answer of two arrays, then charge of the first',
      (gate, requests) => {
        gate.answer(requests);
        gate.answer(requestsOf());
        return gate.charge(requests, send);
      },
      3,
    ],
    [
      'answer, then two charges of the same array',
      async (gate, requests) => {
        gate.answer(requests);
        await gate.charge(requests, send);
        return gate.charge(requests, send);
      },
      2,
    ],
  ];

  it.each(cases)('%s', async (_name, run, expected) => {
    await run(new RefusalGate(() => now), requestsOf());
    expect(lookups).toHaveBeenCalledTimes(expected);
  });
});
