import type { Rule } from '../algorithms/algorithm.types.js';
import { periodAt } from './calendar-period.js';

/** Each quota rule's last period without an anchor, as a rule: every request of the period shares it. */
const lastPeriod = new WeakMap<Rule, Rule>();

/**
 * A quota's rule for a request at `now` (Unix ms, the store's clock): the calendar period that
 * holds it (from the identity's `anchor`, Unix ms, when it has one) as the rule's `origin`, its
 * start, and its window, `burst / rps`, the period's length. Any other rule is returned as it is.
 *
 * @throws UnplaceableAnchorError (from `periodAt`) for an anchor whose period the calendar cannot place
 * @example quotaRule({ algorithm: 'quota', rps, burst: 100, calendar: { period: 'month', timeZone: 'UTC' } }, Date.UTC(2026, 1, 10))
 *   // origin: Date.UTC(2026, 1, 1), burst / rps: 28 days
 */
export function quotaRule(rule: Rule, now: number, anchor?: number): Rule {
  const { calendar } = rule;
  if (calendar === undefined) return rule;
  const { start, end } = periodAt(calendar.period, calendar.timeZone, now, anchor);
  const last = anchor === undefined ? lastPeriod.get(rule) : undefined;
  if (last !== undefined && last.origin === start) return last;
  const made: Rule = { ...rule, rps: (rule.burst * 1000) / (end - start), origin: start };
  if (anchor === undefined) lastPeriod.set(rule, made);
  return made;
}
