import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { PassThrough, type Readable } from 'node:stream';
import { jest } from '@jest/globals';
import { Observable } from 'rxjs';
import type { RateLimitReleaseEvent } from '../../lib/observability/rate-limit-events.js';
import type { RateLimiter } from '../../lib/limiter/rate-limiter.js';
import type { RateLimitDecision } from '../../lib/stores/rate-limit-store.interface.js';

/**
 * What the apps of `test/e2e/request-life.e2e-spec.ts` tell the test of each request, and what
 * the test tells them (`Life`); and what the engine did with each request (`EngineWatch`). A
 * request names itself and its client in what it sends (`Ask`); the test waits for what the app
 * reports, never for time.
 */

/** What a request carries: who it is, and how the app is to treat it. */
export interface Ask {
  /** The request's own id. */
  id: string;
  /** The client it is limited as: a fresh one per run. */
  client: string;
  /** The key function waits until the test lets it go (`Life.letKeyGo`): the decision waits with it. */
  hold?: true;
  /** The guard after the module's refuses it. */
  refuse?: true;
  /** The global interceptor answers it itself, without the handler. */
  cached?: true;
  /** The handler streams its answer: a first chunk at once, then what the test ends it with. */
  stream?: true;
}

/** How the test ends a handler: it returns, or it fails (a streamed answer errors mid-way). */
export type Ending = 'ok' | 'error';

/** The first chunk of a streamed answer, and its last, on a stream that ends well. */
export const FIRST_CHUNK = 'first chunk\n';
export const LAST_CHUNK = 'last chunk\n';

/**
 * A request's client as its handler sees it, so that a handler stops working for a client that
 * has gone (HTTP: its response closed; socket.io: its connection).
 */
export interface ClientWatch {
  readonly gone: boolean;
  /** Calls `listener` when the client goes; the function returned stops watching. */
  onGone(listener: () => void): () => void;
}

/** A client the transport never says is gone (a TCP message). */
export const NEVER_GONE: ClientWatch = { gone: false, onGone: () => () => undefined };

/** A handler that started with its client's in flight at the limit already: `inFlight` with it. */
export interface Breach {
  id: string;
  inFlight: number;
}

/** A promise and what settles it, once. */
class Signal<T = void> {
  readonly promise: Promise<T>;
  settled = false;
  /** What it settled with. */
  value: T | undefined;
  private settle!: (value: T) => void;

  constructor() {
    this.promise = new Promise<T>((resolve) => (this.settle = resolve));
  }

  resolve(value: T): void {
    if (this.settled) return;
    this.settled = true;
    this.value = value;
    this.settle(value);
  }
}

/** What the app reported of one request, and what the test told it. */
class Tracked {
  readonly keyAsked = new Signal();
  readonly keyGo = new Signal();
  /** The server saw the client go (watched from the key function on). */
  readonly gone = new Signal();
  readonly entered = new Signal();
  readonly exited = new Signal();
  readonly ending = new Signal<Ending>();
}

/**
 * The requests of the apps, as their key functions and handlers report them, and the test's
 * hold on them. A handler counts itself in flight, per client, from when it starts its work
 * until it stops: when the test ends it, or as soon as its client goes (a well-behaved handler
 * does no more work for a client that has left, and does none for one gone before it started).
 */
export class Life {
  private readonly requests = new Map<string, Tracked>();
  private readonly working = new Set<string>();
  private readonly inFlight = new Map<string, number>();
  private readonly breaches = new Map<string, Breach[]>();

  constructor(readonly limit: number) {}

  // -------------------------------------------------------------------------------------------
  // Told by the app

  /** The key function of request `id` runs (before the decision): the client is watched from now on. */
  asked(id: string, client: ClientWatch): void {
    const tracked = this.of(id);
    tracked.keyAsked.resolve();
    if (client.gone) tracked.gone.resolve();
    else client.onGone(() => tracked.gone.resolve());
  }

  /** What the key function of a held request waits for. */
  keyGate(id: string): Promise<void> {
    return this.of(id).keyGo.promise;
  }

  /** A handler's work: until the test ends it (its ending), or its client goes (`'gone'`). */
  async work(ask: Ask, client: ClientWatch): Promise<Ending | 'gone'> {
    if (client.gone) return 'gone';
    return new Promise((resolve) => this.run(ask, client, resolve));
  }

  /** A streamed answer's work: the first chunk at once, then the rest or an error, as the test ends it. */
  stream(ask: Ask, client: ClientWatch): Readable {
    const body = new PassThrough();
    if (client.gone) return body.end();
    this.run(ask, client, (ending) => {
      if (ending === 'ok') body.end(LAST_CHUNK);
      else body.destroy(ending === 'gone' ? undefined : new Error(`stream ${ask.id} failed`));
    });
    body.write(FIRST_CHUNK);
    return body;
  }

  /** A streamed answer as an observable (a gateway's, a microservice's): `failure` makes the error it ends with. */
  observe(ask: Ask, client: ClientWatch, failure: (message: string) => Error): Observable<string> {
    return new Observable<string>((subscriber) => {
      if (client.gone) return subscriber.complete();
      const stop = this.run(ask, client, (ending) => {
        if (ending === 'ok') subscriber.next(LAST_CHUNK);
        if (ending === 'ok' || ending === 'gone') subscriber.complete();
        else subscriber.error(failure(`stream ${ask.id} failed`));
      });
      subscriber.next(FIRST_CHUNK);
      // unsubscribed (the transport dropped it): the work stops
      return stop;
    });
  }

  /**
   * Counts `ask` in flight until the test ends it or its client goes, then leaves the count before
   * `ended` hears how (so the engine hears of the end after the handler stopped). The function it
   * returns stops the work without a word to `ended`.
   */
  private run(ask: Ask, client: ClientWatch, ended: (ending: Ending | 'gone') => void): () => void {
    const tracked = this.of(ask.id);
    this.enter(ask);
    let stopped = false;
    const stop = (ending?: Ending | 'gone'): void => {
      if (stopped) return;
      stopped = true;
      forget();
      this.exit(ask);
      if (ending !== undefined) ended(ending);
    };
    const forget = client.onGone(() => stop('gone'));
    void tracked.ending.promise.then(stop);
    return () => stop();
  }

  // -------------------------------------------------------------------------------------------
  // The test's

  keyAsked(id: string): Promise<void> {
    return this.of(id).keyAsked.promise;
  }

  /** Lets the key function of a held request answer. */
  letKeyGo(id: string): void {
    this.of(id).keyGo.resolve();
  }

  /** Resolves once the server has seen the client of request `id` go. */
  gone(id: string): Promise<void> {
    return this.of(id).gone.promise;
  }

  entered(id: string): Promise<void> {
    return this.of(id).entered.promise;
  }

  exited(id: string): Promise<void> {
    return this.of(id).exited.promise;
  }

  /** Ends the handler of request `id` (now, or once it runs). */
  end(id: string, ending: Ending): void {
    this.of(id).ending.resolve(ending);
  }

  /** Each start of a handler of `client` that made its in flight more than the limit. */
  breachesOf(client: string): readonly Breach[] {
    return this.breaches.get(client) ?? [];
  }

  /** Forgets a run's requests and client, once it is over. */
  forget(ids: readonly string[], client: string): void {
    for (const id of ids) this.requests.delete(id);
    this.inFlight.delete(client);
    this.breaches.delete(client);
  }

  private enter({ id, client }: Ask): void {
    this.working.add(id);
    const count = (this.inFlight.get(client) ?? 0) + 1;
    this.inFlight.set(client, count);
    if (count > this.limit) {
      const breaches = this.breaches.get(client) ?? [];
      breaches.push({ id, inFlight: count });
      this.breaches.set(client, breaches);
    }
    this.of(id).entered.resolve();
  }

  private exit({ id, client }: Ask): void {
    if (!this.working.delete(id)) return;
    this.inFlight.set(client, (this.inFlight.get(client) ?? 1) - 1);
    this.of(id).exited.resolve();
  }

  private of(id: string): Tracked {
    let tracked = this.requests.get(id);
    if (tracked === undefined) this.requests.set(id, (tracked = new Tracked()));
    return tracked;
  }
}

/** How the engine decided a request: admitted, refused, or not at all (the store failed: `failMode` answered). */
export type Decided = 'admitted' | 'refused' | 'failed';

/** What one request's release did. */
interface Release {
  /** Releases of its slot the engine started. */
  calls: number;
  /** Resolves once the first has landed or been given up (`RateLimiter.release`'s promise). */
  done: Signal;
}

/**
 * What an app's engine did with each request, by the request's id (`idOf` reads it from the
 * context of a run of the guard): its decision (`RateLimiter.limit`'s verdict) and the releases
 * of its slot (`RateLimiter.release`, whose promise resolves once the release landed, retries
 * included). A release's decisions are those of the verdict that admitted the request: the
 * watch knows whose slot each release gives back.
 */
export class EngineWatch {
  private readonly decisions = new Map<string, Signal<Decided>>();
  private readonly releases = new Map<string, Release>();
  /** The store keys each request was decided on. */
  private readonly keys = new Map<string, readonly string[]>();
  private readonly owners = new WeakMap<RateLimitDecision, string>();
  /** Releases of decisions no admitted request of this watch took. */
  readonly strays: string[] = [];
  /** Steps of failed releases' retries, as the `nestjs-ratelimit:release` channel tells them. */
  readonly retries: RateLimitReleaseEvent[] = [];
  private failureWaiters: Array<() => void> = [];
  private readonly onRelease = (message: unknown): void => {
    const event = message as RateLimitReleaseEvent;
    this.retries.push(event);
    if (event.outcome !== 'failed') return;
    const waiters = this.failureWaiters;
    this.failureWaiters = [];
    for (const wake of waiters) wake();
  };

  constructor(limiter: RateLimiter, idOf: (context: Parameters<RateLimiter['limit']>[0]['context']) => string) {
    const limit = limiter.limit.bind(limiter);
    jest.spyOn(limiter, 'limit').mockImplementation((call, policies, hooks) => {
      const id = idOf(call.context);
      let verdict: ReturnType<RateLimiter['limit']>;
      try {
        verdict = limit(call, policies, hooks);
      } catch (error) {
        this.decided(id).resolve('failed');
        throw error;
      }
      if (!(verdict instanceof Promise)) this.note(id, verdict);
      else
        verdict.then(
          (known) => this.note(id, known),
          () => this.decided(id).resolve('failed'),
        );
      return verdict;
    });
    const release = limiter.release.bind(limiter);
    jest.spyOn(limiter, 'release').mockImplementation((decisions, leaseMs) => {
      const released = release(decisions, leaseMs);
      const id = this.owners.get(decisions[0]);
      if (id === undefined) {
        this.strays.push(decisions.map((decision) => decision.policy).join(', '));
        return released;
      }
      const record = this.releaseOf(id);
      record.calls++;
      void released.then(() => record.done.resolve());
      return released;
    });
    subscribe('nestjs-ratelimit:release', this.onRelease);
  }

  /** Resolves with how the engine decided request `id`, once it has. */
  decision(id: string): Promise<Decided> {
    return this.decided(id).promise;
  }

  /** How the engine decided request `id`, if it has. */
  decidedNow(id: string): Decided | undefined {
    return this.decisions.get(id)?.value;
  }

  /** Resolves once the release of request `id`'s slot has landed (or been given up). */
  released(id: string): Promise<void> {
    return this.releaseOf(id).done.promise;
  }

  /** The store keys request `id` was decided on (none before its decision). */
  keysOf(id: string): readonly string[] {
    return this.keys.get(id) ?? [];
  }

  /** Releases of request `id`'s slot the engine started. */
  releaseCalls(id: string): number {
    return this.releases.get(id)?.calls ?? 0;
  }

  /** Resolves at the next failed attempt of a release (see `ReleaseRetries`). */
  nextReleaseFailure(): Promise<void> {
    return new Promise((resolve) => this.failureWaiters.push(resolve));
  }

  /** Forgets a run's requests. */
  forget(ids: readonly string[]): void {
    for (const id of ids) {
      this.decisions.delete(id);
      this.releases.delete(id);
      this.keys.delete(id);
    }
    this.strays.length = 0;
    this.retries.length = 0;
  }

  close(): void {
    unsubscribe('nestjs-ratelimit:release', this.onRelease);
  }

  private note(id: string, verdict: Awaited<ReturnType<RateLimiter['limit']>>): void {
    if (verdict === undefined) return;
    this.keys.set(
      id,
      verdict.requests.map((request) => request.key),
    );
    if (verdict.allowed) for (const decision of verdict.decisions) this.owners.set(decision, id);
    this.decided(id).resolve(verdict.allowed ? 'admitted' : 'refused');
  }

  private decided(id: string): Signal<Decided> {
    let decided = this.decisions.get(id);
    if (decided === undefined) this.decisions.set(id, (decided = new Signal<Decided>()));
    return decided;
  }

  private releaseOf(id: string): Release {
    let record = this.releases.get(id);
    if (record === undefined) this.releases.set(id, (record = { calls: 0, done: new Signal() }));
    return record;
  }
}
