import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import {
  type DescribedPolicy,
  type DescribedRule,
  type HeaderFamily,
  type HeaderPlan,
  headerPlan,
  limiting,
  writeRateLimitHeaders,
} from './rate-limit-headers.js';

/**
 * The decisions an answer that several of them share has been given (a GraphQL HTTP response:
 * every field of every operation it carries), so that its headers say what one request's would
 * say of them all: every policy listed once, and the single-policy headers and `Retry-After` from
 * the decision that frees up last (see `limiting`). Each decision adds to it and the whole set is
 * written again, so whatever the order the fields resolve in, the last write holds every one.
 */
export class SharedAnswer {
  /** Each policy's place in `policies` and `decisions`, by name. */
  private readonly slots = new Map<string, number>();
  private readonly policies: DescribedPolicy[] = [];
  private readonly decisions: RateLimitDecision[] = [];
  /** Each decision's rule, as its request had it (a quota's names its period). */
  private readonly rules: DescribedRule[] = [];
  /** The header plan of `policies`, made again when they change; `null`: no family is sent. */
  private plan: HeaderPlan | null | undefined;
  /** Of the refusals, the one that frees up last. */
  private refused: RateLimitDecision | undefined;
  /** Whether the limiter could not answer a decision (`failMode: 'closed'`, a wait cut short by shutdown). */
  private unavailable = false;

  /**
   * Adds the decisions of one run of the guard (one per policy), with its store requests (a quota's
   * rule names its request's period; without them, each policy's own rule); a policy decided before
   * keeps the one `limiting` picks of its own.
   */
  add(
    policies: readonly DescribedPolicy[],
    decisions: readonly RateLimitDecision[],
    requests?: readonly { rule: DescribedRule }[],
  ): this {
    for (let i = 0; i < policies.length; i++) {
      const slot = this.slots.get(policies[i].name);
      if (slot === undefined) {
        this.slots.set(policies[i].name, this.policies.length);
        this.policies.push(policies[i]);
        this.decisions.push(decisions[i]);
        this.rules.push(requests?.[i].rule ?? policies[i].rule);
        this.plan = undefined;
      } else if (limiting([this.decisions[slot], decisions[i]]) !== this.decisions[slot]) {
        this.decisions[slot] = decisions[i];
        this.rules[slot] = requests?.[i].rule ?? policies[i].rule;
        // two policies of one name on different fields: the numbers are those of the one shown
        if (this.policies[slot] !== policies[i]) [this.policies[slot], this.plan] = [policies[i], undefined];
      }
    }
    return this;
  }

  /**
   * Writes the families' headers for every decision so far, and `Retry-After` once a refusal or
   * an answer the limiter could not give asks for one (`undefined`: remove it, no wait would do).
   *
   * @param nowMs wall-clock time, ms, that `X-RateLimit-Reset` counts from
   */
  write(
    families: readonly HeaderFamily[],
    nowMs: number,
    set: (name: string, value: string | undefined) => void,
  ): void {
    if (this.plan === undefined) this.plan = headerPlan(families, this.policies) ?? null;
    if (this.plan !== null) writeRateLimitHeaders(this.plan, this.decisions, nowMs, set, this.rules);
    if (this.refused !== undefined || this.unavailable) set('Retry-After', this.retryAfter());
  }

  /** Adds a refusal (`refused`, the policy a field was refused by), or an answer the limiter could not give (`undefined`). */
  refuse(refused: RateLimitDecision | undefined): this {
    if (refused === undefined) this.unavailable = true;
    else this.refused = this.refused === undefined ? refused : limiting([this.refused, refused]);
    return this;
  }

  /**
   * `Retry-After` in seconds, as one request's: the refusal that frees up last (none when it never
   * does: no wait would do), else 1 when the limiter could not answer; `undefined`: none.
   */
  retryAfter(): string | undefined {
    if (this.refused !== undefined)
      return Number.isFinite(this.refused.retryAfter) ? String(this.refused.retryAfter) : undefined;
    return this.unavailable ? '1' : undefined;
  }
}

/** Each shared answer's decisions, by the object its seam names it by (see `RateLimitContext.sharedAnswer`). */
const ANSWERS = new WeakMap<object, SharedAnswer>();

/** The decisions given so far to the answer `answer` names, made on first use. */
export function sharedAnswer(answer: object): SharedAnswer {
  let shared = ANSWERS.get(answer);
  if (shared === undefined) ANSWERS.set(answer, (shared = new SharedAnswer()));
  return shared;
}
