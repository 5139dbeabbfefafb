/**
 * The algorithms' vocabulary, as the rest of the package imports it: the names (from the
 * registry), the rule a bucket follows, and the types the models are written against.
 */
import type { Algorithm } from './registry.js';
import type { ModelRule } from './model.types.js';

export type { Algorithm } from './registry.js';
export { ALGORITHMS, RATE_ALGORITHMS, RELEASED, SCALED_BY_LIMIT, UNSCALED, WINDOW_ALGORITHMS } from './registry.js';
export type {
  AlgorithmDescriptor,
  AlgorithmModel,
  Held,
  ModelRule,
  Outcome,
  QuotaCalendar,
  RefusableOption,
  Regain,
  StatePacking,
} from './model.types.js';

/**
 * The rule a bucket follows: its algorithm, its rate and its capacity. Plain data, the same for
 * every store.
 */
export interface Rule extends ModelRule {
  algorithm: Algorithm;
}
