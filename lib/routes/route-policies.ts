import { type ExecutionContext, Inject, Injectable, Logger, type Type } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { RateLimitPolicy, ResolvedPolicy } from '../policy/policy.types.js';
import { defaultPolicyName, InvalidPolicyError, resolvePolicy } from '../policy/resolve-policy.js';
import {
  RATE_LIMIT_METERS,
  RATE_LIMIT_OPTIONS,
  RATE_LIMIT_POLICIES,
  RATE_LIMIT_SKIP,
} from '../rate-limit.constants.js';
import { resolvedObligations } from '../policy/obligations.js';
import {
  duplicatePolicyName,
  invalidPolicy,
  invalidSkip,
  meterWithoutSettle,
  slotOnSubscription,
  unknownSkip,
} from '../rate-limit.messages.js';
import type { ResolvedOptions } from '../rate-limit-options.js';
import { type RoutePolicy, routePolicy } from './route-policy.js';

type Handler = (...args: unknown[]) => unknown;

/**
 * The policies that apply to each route: the module's, the controller's and the handler's (a
 * handler policy replaces a class or module policy of the same name), less the skipped ones.
 * Worked out once per route and cached; at start every controller is read, and every provider
 * that declares policies (a gateway, a resolver), so a bad policy fails `app.init()` with a
 * message naming the class and the handler.
 *
 * A `@SkipRateLimit` name that is not a string fails start too. One that names no policy there
 * only logs a warning: module policies may differ between environments (none in a test module),
 * and skipping a policy that is not there is harmless.
 */
@Injectable()
export class RoutePolicies {
  private readonly routes = new Map<Type, Map<Handler, readonly RoutePolicy[]>>();
  private readonly logger = new Logger('RateLimitModule');

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: ResolvedOptions,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {}

  /**
   * Reads the policies of every controller (HTTP routes, microservice handlers) and of every
   * provider that declares some (gateways, resolvers): `RateLimitModule` calls it at start, so a
   * bad one fails `app.init()`.
   *
   * @throws InvalidPolicyError naming the class and handler
   */
  compileAll(): void {
    const declaring = this.discovery.getProviders().filter(({ metatype }) => this.declaresPolicies(metatype));
    for (const wrapper of [...this.discovery.getControllers(), ...declaring]) {
      const controller = wrapper.metatype as Type | undefined;
      const prototype = controller?.prototype as Record<string, Handler> | undefined;
      if (!controller || !prototype) continue;
      // a name skipped on the class is looked for among the policies of all its routes
      const named = new Set<string>();
      for (const method of this.scanner.getAllMethodNames(prototype)) {
        const handler = prototype[method];
        this.remember(controller, handler, this.compile(controller, handler, named));
      }
      const skipped = Reflect.getMetadata(RATE_LIMIT_SKIP, controller) as true | unknown[] | undefined;
      this.checkSkipped(`${controller.name} (class)`, skipped, named);
    }
  }

  /**
   * Whether a provider's class carries `@RateLimit` or `@SkipRateLimit`, itself or on a method: the
   * others (services, factories) handle no requests, and reading them would only cost memory.
   */
  private declaresPolicies(metatype: unknown): boolean {
    const prototype =
      typeof metatype === 'function' ? (metatype.prototype as Record<string, Handler> | undefined) : undefined;
    if (prototype === undefined) return false;
    const declares = (target: object) =>
      Reflect.hasMetadata(RATE_LIMIT_POLICIES, target) || Reflect.hasMetadata(RATE_LIMIT_SKIP, target);
    return (
      declares(metatype as object) ||
      this.scanner.getAllMethodNames(prototype).some((method) => declares(prototype[method]))
    );
  }

  /**
   * The policies of every route read so far (every controller's and declaring provider's once the
   * module has started), module policies among them, as often as they apply: what a factor for
   * them (`RateLimiterService.setScale`) is checked against.
   */
  *all(): Iterable<RoutePolicy> {
    for (const handlers of this.routes.values()) for (const policies of handlers.values()) yield* policies;
  }

  /** The policies of the route a context runs (see `forRoute`). */
  forContext(context: ExecutionContext): readonly RoutePolicy[] {
    return this.forRoute(context.getClass(), context.getHandler() as Handler);
  }

  /** The policies of a route, in order: module, class, handler. */
  forRoute(controller: Type, handler: Handler): readonly RoutePolicy[] {
    return (
      this.routes.get(controller)?.get(handler) ?? this.remember(controller, handler, this.compile(controller, handler))
    );
  }

  private remember(controller: Type, handler: Handler, policies: readonly RoutePolicy[]): readonly RoutePolicy[] {
    let handlers = this.routes.get(controller);
    if (!handlers) this.routes.set(controller, (handlers = new Map<Handler, readonly RoutePolicy[]>()));
    handlers.set(handler, policies);
    return policies;
  }

  /** Resolves a route's policies; the names of all that apply before skipping go into `named`. */
  private compile(controller: Type, handler: Handler, named = new Set<string>()): readonly RoutePolicy[] {
    const route = `${controller.name}.${handler.name}`;
    const byName = new Map<string, ResolvedPolicy>();
    for (const policy of this.options.policies) byName.set(policy.name, policy);
    /** The names the handler declares itself, each replacing a class or module policy of its name. */
    const onHandler = new Set<string>();
    const levels: Array<[Type | Handler, string, string]> = [
      [controller, `${controller.name} (class)`, controller.name],
      [handler, route, route],
    ];
    for (const [target, where, defaultName] of levels) {
      const declared =
        (Reflect.getMetadata(RATE_LIMIT_POLICIES, target) as Array<RateLimitPolicy | RateLimitPolicy[]> | undefined) ??
        [];
      const seen = new Set<string>();
      declared.forEach((policy, i) => {
        const at = declared.length > 1 ? `${where} [${i}]` : where;
        // @RateLimit keeps an empty list as one entry (see rate-limit.decorator.ts)
        if (Array.isArray(policy) && policy.length === 0) {
          throw new InvalidPolicyError(
            invalidPolicy(at, '@RateLimit([]) lists no policy; give at least one (@SkipRateLimit() exempts a route)'),
          );
        }
        const resolved = resolvePolicy(policy as RateLimitPolicy, at, defaultName);
        if (seen.has(resolved.name)) {
          throw new InvalidPolicyError(invalidPolicy(where, duplicatePolicyName(resolved.name)));
        }
        seen.add(resolved.name);
        byName.set(resolved.name, resolved);
        if (target !== handler) return;
        onHandler.add(resolved.name);
        if (resolvedObligations(resolved).release && isSubscription(handler))
          throw new InvalidPolicyError(invalidPolicy(at, slotOnSubscription(resolved.name)));
      });
    }

    for (const name of byName.keys()) named.add(name);

    const skip = this.skipped(controller, handler, route, new Set(byName.keys()));
    if (skip === true) return [];
    // what a policy scoped to the route (`scope: 'route'`) puts in its bucket keys
    const keyed = defaultPolicyName(route);
    const policies = [...byName.values()]
      .filter((policy) => !skip.has(policy.name))
      .map((policy) =>
        onHandler.has(policy.name)
          ? { ...routePolicy(policy, this.options, keyed), onHandler: true }
          : routePolicy(policy, this.options, keyed),
      );
    checkMeters(route, handler, policies);
    return policies;
  }

  private skipped(controller: Type, handler: Handler, route: string, names: ReadonlySet<string>): true | Set<string> {
    const onClass = Reflect.getMetadata(RATE_LIMIT_SKIP, controller) as true | string[] | undefined;
    const onHandler = Reflect.getMetadata(RATE_LIMIT_SKIP, handler) as true | string[] | undefined;
    this.checkSkipped(route, onHandler, names);
    if (onClass === true || onHandler === true) return true;
    return new Set([...(onClass ?? []), ...(onHandler ?? [])]);
  }

  /** Refuses a skipped name that is not a string; warns of one that no policy in `names` has. */
  private checkSkipped(where: string, skipped: true | unknown[] | undefined, names: ReadonlySet<string>): void {
    if (skipped === undefined || skipped === true) return;
    for (const name of skipped) {
      if (typeof name !== 'string' || name === '') throw new InvalidPolicyError(invalidSkip(where, name));
      if (!names.has(name)) this.logger.warn(unknownSkip(where, name, [...names]));
    }
  }
}

/** `@nestjs/graphql`'s metadata key for a resolver method's kind, read without importing it (an optional peer). */
const RESOLVER_TYPE = 'graphql:resolver_type';

/** Whether a handler is a GraphQL subscription's (`@Subscription()`): the guard limits no point of a subscription's life. */
function isSubscription(handler: Handler): boolean {
  return Reflect.getMetadata(RESOLVER_TYPE, handler) === 'Subscription';
}

/**
 * The policies a handler's `@RateLimitMeter()` parameters name: each one the route has and that
 * settles (unnamed: its only one that does).
 *
 * @throws InvalidPolicyError naming the route
 */
function checkMeters(route: string, handler: Handler, policies: readonly RoutePolicy[]): void {
  const named = Reflect.getMetadata(RATE_LIMIT_METERS, handler) as (string | undefined)[] | undefined;
  if (named === undefined) return;
  const settling = policies.filter((policy) => policy.settles !== undefined).map((policy) => policy.name);
  for (const name of named) {
    const found = name === undefined ? settling.length === 1 : settling.includes(name);
    if (!found) throw new InvalidPolicyError(invalidPolicy(route, meterWithoutSettle(name, settling)));
  }
}
