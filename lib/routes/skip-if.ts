import type { ExecutionContext } from '@nestjs/common';
import type { LimitedRequest } from '../keys/identity.js';
import type { SkipIf } from '../policy/policy.types.js';
import type { RoutePolicy } from './route-policy.js';

/** Whether a policy of a route has a `skipIf` (a loop, not `some`: no closure per request). */
export function anySkipIf(policies: readonly RoutePolicy[]): boolean {
  for (const policy of policies) if (policy.skipIf !== undefined) return true;
  return false;
}

/**
 * A route's policies less those a `skipIf` lets a request pass: none when the module's says so,
 * else one list per route and set skipped (keyed by the indexes skipped, however many policies the
 * route has), made once, so whatever is cached per list (a header plan) is too.
 */
export class Unskipped {
  private readonly lists = new WeakMap<readonly RoutePolicy[], Map<string, readonly RoutePolicy[]>>();

  /** @param skipIf the module's `skipIf`, if any */
  constructor(private readonly skipIf: SkipIf | undefined) {}

  /** Whether no `skipIf` could skip any of `policies`: then they all apply, with no promise to wait for. */
  none(policies: readonly RoutePolicy[]): boolean {
    return this.skipIf === undefined && !anySkipIf(policies);
  }

  /** `policies` less those a `skipIf` says `request` passes; each `skipIf` runs once, with `(context, request)`. */
  async of(
    policies: readonly RoutePolicy[],
    request: LimitedRequest,
    context: ExecutionContext,
  ): Promise<readonly RoutePolicy[]> {
    if (this.skipIf !== undefined && (await this.skipIf(context, request))) return [];
    let skipped: number[] | undefined;
    for (let i = 0; i < policies.length; i++) {
      const skipIf = policies[i].skipIf;
      if (skipIf !== undefined && (await skipIf(context, request))) (skipped ??= []).push(i);
    }
    if (skipped === undefined) return policies;
    let lists = this.lists.get(policies);
    if (lists === undefined) this.lists.set(policies, (lists = new Map<string, readonly RoutePolicy[]>()));
    const set = skipped.join(',');
    let list = lists.get(set);
    if (list === undefined) lists.set(set, (list = without(policies, skipped)));
    return list;
  }
}

/** `policies` less those at `indexes`. */
function without(policies: readonly RoutePolicy[], indexes: readonly number[]): readonly RoutePolicy[] {
  return policies.filter((_policy, i) => !indexes.includes(i));
}
