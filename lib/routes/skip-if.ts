import type { ExecutionContext } from '@nestjs/common';
import type { LimitedRequest } from '../keys/identity.js';
import type { RoutePolicy } from './route-policy.js';

/** Whether a policy of a route has a `skipIf` (a loop, not `some`: no closure per request). */
export function anySkipIf(policies: readonly RoutePolicy[]): boolean {
  for (const policy of policies) if (policy.skipIf !== undefined) return true;
  return false;
}

/**
 * A route's policies less those whose `skipIf` lets a request pass: one list per route and set
 * skipped (a bit per policy), made once, so whatever is cached per list (a header plan) is too.
 */
export class Unskipped {
  private readonly lists = new WeakMap<readonly RoutePolicy[], Map<number, readonly RoutePolicy[]>>();

  /** `policies` less those whose `skipIf` says `request` passes; each `skipIf` runs once, with `(context, request)`. */
  async of(policies: readonly RoutePolicy[], request: LimitedRequest, context: ExecutionContext): Promise<readonly RoutePolicy[]> {
    let skipped = 0;
    for (let i = 0; i < policies.length; i++) if (policies[i].skipIf !== undefined && (await policies[i].skipIf!(context, request))) skipped |= 1 << i;
    if (skipped === 0) return policies;
    let lists = this.lists.get(policies);
    if (lists === undefined) this.lists.set(policies, (lists = new Map()));
    let list = lists.get(skipped);
    if (list === undefined) lists.set(skipped, (list = policies.filter((_policy, i) => (skipped & (1 << i)) === 0)));
    return list;
  }
}
