import type { AlgorithmModel, Limit, Outcome } from './algorithm.types.js';
import { tokenBucket } from './token-bucket.js';

/** The pure model of each algorithm that is available, by name. */
export const MODELS: { readonly [A in Limit['algorithm']]?: AlgorithmModel<any> } = {
  token_bucket: tokenBucket,
};

/** Looks up an algorithm's model; policies are validated at start, so a miss is a bug. */
export function modelOf(limit: Limit): AlgorithmModel<unknown> {
  const model = MODELS[limit.algorithm];
  if (!model) throw new Error(`Algorithm "${limit.algorithm}" is not available`);
  return model;
}

/** One policy's part of a request: its stored state, its limit and the cost. */
export interface Entry<State = unknown> {
  state: State | undefined;
  limit: Limit;
  cost: number;
}

/** What a request does to every policy's state, and what each policy reports. */
export interface Verdict<State = unknown> {
  /** True when every policy admits the request. */
  allowed: boolean;
  outcomes: Outcome[];
  /** The states to store when `allowed` and charging (else nothing is written). */
  next: State[];
}

/**
 * Decides one request against several policies, all-or-nothing: the request is admitted only
 * when every policy admits it, and only then is any bucket charged. With `charge` false it only
 * looks (peek). The Redis script runs the same two passes in one atomic call.
 */
export function decideAll(entries: readonly Entry[], now: number, charge: boolean): Verdict {
  const models = entries.map((entry) => modelOf(entry.limit));
  const current = entries.map((entry, i) => models[i].current(entry.state, now, entry.limit));
  const admits = entries.map((entry, i) => models[i].admits(current[i], entry.limit, entry.cost));
  const allowed = admits.every(Boolean);
  const charged = allowed && charge;
  const next = charged
    ? entries.map((entry, i) => models[i].charge(current[i], entry.limit, entry.cost))
    : current;
  const outcomes = entries.map((entry, i) => models[i].report(next[i], entry.limit, entry.cost, admits[i]));
  return { allowed, outcomes, next };
}
