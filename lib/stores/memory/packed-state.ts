import type { Algorithm, Held, StatePacking } from '../../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS, ALGORITHMS } from '../../algorithms/registry.js';

/**
 * Each algorithm's packing (its descriptor's), by name: a plain object of the same shape as the
 * models', so the lookup per decision costs a property read. A row is `PACKED_WIDTH` doubles of a
 * `Float64Array`; `write` returns what does not fit in it (`undefined` for all but the log), and
 * `read` gets it back.
 */
export const PACKED_STATES: { readonly [A in Algorithm]: StatePacking<Held> } = Object.fromEntries(
  ALGORITHMS.map((algorithm) => [algorithm, ALGORITHM_DESCRIPTORS[algorithm].packing]),
) as { [A in Algorithm]: StatePacking<Held> };

/** Numbers a packed state takes at most: the widest algorithm's (a sliding window counter's five). */
export const PACKED_WIDTH = Math.max(...ALGORITHMS.map((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].packing.width));
