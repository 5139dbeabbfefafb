import type { ExecutionContext, Logger } from '@nestjs/common';
import type { KeySource } from '../policy/policy.types.js';
import { userNotYetSet } from '../rate-limit.messages.js';

/**
 * Warns once when a `'user'` key found no user on a request that carries `Authorization`: the
 * app's auth guard has most likely not run yet (see `runAs`).
 */
export class UserNotYetSetWarning {
  private warned = false;

  constructor(private readonly logger: Logger) {}

  /** Checks one policy's identity for a request with `Authorization`, until the warning is given. */
  check(keys: readonly KeySource[], identity: string, context: ExecutionContext): void {
    if (this.warned || identity.startsWith('user:') || !keys.includes('user')) return;
    this.warned = true;
    this.logger.warn(userNotYetSet(routeName(context)));
  }
}

/** `Controller.handler`, as messages name a route. */
export function routeName(context: ExecutionContext): string {
  return `${context.getClass().name}.${context.getHandler().name}`;
}
