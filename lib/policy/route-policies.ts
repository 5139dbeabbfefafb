import { Inject, Injectable, type OnModuleInit, type Type } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { invalidPolicy } from '../rate-limit.errors.js';
import { RATE_LIMIT_OPTIONS, RATE_LIMIT_POLICIES, RATE_LIMIT_SKIP } from '../rate-limit.constants.js';
import type { ResolvedOptions } from '../rate-limit-options.js';
import type { KeySource, RateLimitPolicy, ResolvedPolicy } from './policy.types.js';
import { InvalidPolicyError, resolvePolicy } from './resolve-policy.js';

/** A policy as it applies to a route, its key sources settled. */
export interface RoutePolicy extends ResolvedPolicy {
  keys: readonly KeySource[];
}

type Handler = (...args: unknown[]) => unknown;

/**
 * The policies that apply to each route: the module's, the controller's and the handler's (a
 * handler policy replaces a class or module policy of the same name), less the skipped ones.
 * Worked out once per route and cached; at start every controller is read, so a bad policy
 * fails `app.init()` with a message naming the controller and the handler.
 */
@Injectable()
export class RoutePolicies implements OnModuleInit {
  private readonly routes = new Map<Type, Map<Handler, readonly RoutePolicy[]>>();

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: ResolvedOptions,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {}

  onModuleInit(): void {
    for (const wrapper of this.discovery.getControllers()) {
      const controller = wrapper.metatype as Type | undefined;
      if (!controller?.prototype) continue;
      for (const method of this.scanner.getAllMethodNames(controller.prototype)) {
        this.forRoute(controller, controller.prototype[method]);
      }
    }
  }

  /** The policies of a route, in order: module, class, handler. */
  forRoute(controller: Type, handler: Handler): readonly RoutePolicy[] {
    let handlers = this.routes.get(controller);
    if (!handlers) this.routes.set(controller, (handlers = new Map()));
    let policies = handlers.get(handler);
    if (!policies) handlers.set(handler, (policies = this.compile(controller, handler)));
    return policies;
  }

  private compile(controller: Type, handler: Handler): readonly RoutePolicy[] {
    const route = `${controller.name}.${handler.name}`;
    const byName = new Map<string, ResolvedPolicy>();
    for (const policy of this.options.policies) byName.set(policy.name, policy);
    const levels: Array<[Function, string, string]> = [
      [controller, `${controller.name} (class)`, controller.name],
      [handler, route, route],
    ];
    for (const [target, where, defaultName] of levels) {
      const declared: RateLimitPolicy[] = Reflect.getMetadata(RATE_LIMIT_POLICIES, target) ?? [];
      const seen = new Set<string>();
      declared.forEach((policy, i) => {
        const resolved = resolvePolicy(policy, declared.length > 1 ? `${where} [${i}]` : where, defaultName);
        if (seen.has(resolved.name)) {
          throw new InvalidPolicyError(
            invalidPolicy(where, `two policies are named "${resolved.name}"; give each policy its own "name"`),
          );
        }
        seen.add(resolved.name);
        byName.set(resolved.name, resolved);
      });
    }

    const skip = this.skipped(controller, handler);
    if (skip === true) return [];
    return [...byName.values()]
      .filter((policy) => !skip.has(policy.name))
      .map((policy) => ({ ...policy, keys: policy.key ?? this.options.key }));
  }

  private skipped(controller: Type, handler: Handler): true | Set<string> {
    const onClass: true | string[] | undefined = Reflect.getMetadata(RATE_LIMIT_SKIP, controller);
    const onHandler: true | string[] | undefined = Reflect.getMetadata(RATE_LIMIT_SKIP, handler);
    if (onClass === true || onHandler === true) return true;
    return new Set([...(onClass ?? []), ...(onHandler ?? [])]);
  }
}
