import type { RoutePolicy } from '../routes/route-policy.js';
import { type Charge, recordOn } from './limited-call.js';

type Answer = boolean | Promise<boolean>;

/**
 * A request or message is charged once per policy, however many times the guard runs on it (a
 * global guard and `@UseGuards`, the fields of one GraphQL operation): a run decides only the
 * policies `uncharged` on its record, and `charged` keeps its verdict there, for a later run to
 * share. The guard decides between the two calls; neither calls it.
 */

/** The earlier charge of a policy on a record (by its bucket keys' start), if any. */
function chargeOf(charges: readonly Charge[], policy: RoutePolicy): Charge | undefined {
  return charges.find((earlier) => earlier.policies.some(({ keyPrefix }) => keyPrefix === policy.keyPrefix));
}

/** The policies of `policies` not charged on `holder` (a target or a selection) yet: all of them, the same list, at first. */
export function uncharged(holder: object, policies: readonly RoutePolicy[]): readonly RoutePolicy[] {
  const { charges } = recordOn(holder);
  return charges === undefined ? policies : policies.filter((policy) => chargeOf(charges, policy) === undefined);
}

/**
 * Keeps the verdict on the `fresh` policies (those `uncharged` gave) on `holder`, and gives the
 * run's answer under all of `policies`: on a holder charged for the first time, the verdict
 * itself (`true` at once for an admitted request); else once it and the earlier verdicts on the
 * others have settled (a refusal among them rejects).
 */
export function charged(
  holder: object,
  policies: readonly RoutePolicy[],
  fresh: readonly RoutePolicy[],
  verdict: Answer,
): Answer {
  const record = recordOn(holder);
  const { charges } = record;
  if (charges === undefined) {
    record.charges = [{ policies: fresh, verdict }];
    return verdict;
  }
  // an admitted verdict is `true` at once; a refusal, or one still open, a promise
  const pending: Promise<boolean>[] = [];
  for (const policy of policies) {
    const earlier = chargeOf(charges, policy)?.verdict;
    if (earlier instanceof Promise) pending.push(earlier);
  }
  if (fresh.length > 0) {
    charges.push({ policies: fresh, verdict });
    if (verdict instanceof Promise) pending.push(verdict);
  }
  return Promise.all(pending).then(() => true);
}
