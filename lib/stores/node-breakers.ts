import { CircuitBreaker } from '../utils/circuit-breaker.js';
import type { RateLimitStoreError } from './rate-limit-store.error.js';

/** Store failures in a row, on one server, after which calls to it stop. */
export const BREAKER_THRESHOLD = 3;
/** How often a stopped server gets a probe call, ms: limiting is back within this after it answers. */
export const BREAKER_PROBE_MS = 250;
/**
 * How long a server's breaker must stay closed before its outage is said to be over, ms: a
 * server that answers a probe and fails again soon after (memory full, a node half up) is one
 * outage, logged once, not once per probe.
 */
export const OUTAGE_OVER_MS = 1_000;

/** What `NodeBreakers` tells of its breakers: every transition, and an outage's start and end once each. */
export interface BreakerWatch {
  /** A server's breaker opened (calls to it stop) or closed (it answers again): every time. */
  transition(state: 'open' | 'closed'): void;
  /** A server's calls stopped, first of its outage (`node`: '' for the store's one server). */
  outage(failure: RateLimitStoreError, node: string): void;
  /** A server's breaker has stayed closed `OUTAGE_OVER_MS`: its outage is over. */
  over(node: string): void;
}

/** A server's breaker, and where its outage stands. */
interface NodeState {
  readonly breaker: CircuitBreaker;
  /** Whether an outage was told and its end not yet. */
  outage: boolean;
  /** When the breaker last closed during a told outage, ms. */
  closedAt: number;
}

/** The one node of a store with one server (a single Redis, Sentinel, any store that says nothing of its nodes). */
export const ONE_NODE: readonly string[] = [''];

/**
 * A circuit breaker per server of the store (per master of a Redis Cluster; one for any other
 * store), so a dead server stops the calls for its own keys and no other's. A call for keys on
 * several servers goes when every one of them lets it. An outage is told once when its first
 * breaker opens and once when the breaker has stayed closed `OUTAGE_OVER_MS`, however often it
 * flaps in between.
 */
export class NodeBreakers {
  private readonly nodes = new Map<string, NodeState>();

  constructor(
    private readonly watch: BreakerWatch,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether a call may go to these servers now (a probe, on each that is open). */
  allow(nodes: readonly string[]): boolean {
    if (nodes.length === 1) return this.of(nodes[0]).breaker.allow();
    for (const node of nodes) if (!this.of(node).breaker.wouldAllow()) return false;
    for (const node of nodes) this.of(node).breaker.allow();
    return true;
  }

  /** A call to these servers answered. */
  succeeded(nodes: readonly string[]): void {
    for (const node of nodes) {
      const state = this.nodes.get(node);
      if (state === undefined) continue;
      if (state.breaker.succeeded()) {
        state.closedAt = this.now();
        this.watch.transition('closed');
      } else if (state.outage && this.now() - state.closedAt >= OUTAGE_OVER_MS) {
        state.outage = false;
        this.watch.over(node);
      }
    }
  }

  /** A call failed: on `failure.node` when it says, else on each of these servers. */
  failed(nodes: readonly string[], failure: RateLimitStoreError): void {
    for (const node of failure.node === undefined ? nodes : [failure.node]) {
      const state = this.of(node);
      if (!state.breaker.failed()) continue;
      this.watch.transition('open');
      if (state.outage) continue;
      state.outage = true;
      this.watch.outage(failure, node);
    }
  }

  private of(node: string): NodeState {
    let state = this.nodes.get(node);
    if (state === undefined) {
      const breaker = new CircuitBreaker({
        threshold: BREAKER_THRESHOLD,
        probeAfterMs: BREAKER_PROBE_MS,
        now: this.now,
      });
      this.nodes.set(node, (state = { breaker, outage: false, closedAt: 0 }));
    }
    return state;
  }
}
