import type { AlgorithmDescriptor } from './model.types.js';
import { SLIDING_WINDOW_LOG, type SlidingWindowLogState } from './sliding-window-log.js';

/**
 * Concurrency: at most `limit` (= burst) requests of one identity in flight. A slot is an entry of
 * a sliding window log whose window is the lease (`burst / rps` seconds: the rule of a policy with
 * `lease: '5m'` and `limit: 2` has `rps = 2 / 300`), so the log's model is this one's, exactly:
 * a request takes a slot (an entry at its time) when fewer than `limit` are held, and gives it
 * back by a refund of its decision when it ends (the log drops the entry taken at that ms). A
 * slot nobody gives back (its process died) leaves the log when its lease ends, as an entry
 * leaves a window. In Redis the slots are a sorted set, each member scored by when it was taken.
 *
 * What differs is what a refusal says: a slot comes back when a request ends, which time does not
 * tell (`regain: 'release'`): a refusal's `Retry-After` is 1 s, and no refusal is reused.
 */
export const CONCURRENCY: AlgorithmDescriptor<SlidingWindowLogState> = {
  ...SLIDING_WINDOW_LOG,
  tag: 'cc',
  regain: 'release',
  scaledBy: 'none',
  saidAs: 'lease',
  refuses: {
    blockFor: 'a slot comes back when a request ends, and a block would keep the client out with slots free',
    adaptive: 'requests in flight are not a rate to scale',
    "count: 'failures'": 'every request gives its slot back when it ends',
    settle: 'a request holds one slot while it runs, whatever it costs, and gives it back when it ends',
  },
};
