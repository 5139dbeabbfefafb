import type { ExecutionContext, Logger } from '@nestjs/common';
import type { KeySource, LimitedRequest } from '../policy/policy.types.js';
import { routeName, userNotYetSet } from '../rate-limit.messages.js';

/** What hears of a request limited by its IP: a context's seam, which checks how the address was found. */
interface IpWatcher {
  limitedByIp?(request: LimitedRequest): void;
}

/** A run of the guard as the warnings read it (see `LimitedCall`). */
interface Checked {
  readonly request: LimitedRequest;
  readonly context: ExecutionContext;
  readonly seam: IpWatcher;
}

/**
 * The warnings about how a policy's identity for a request was found, given once the identity is
 * known (a key function's promise has settled): a `'user'` key that found no user on a request
 * that carries `Authorization`, warned once (the app's auth guard has most likely not run yet, see
 * `runAs`); and an identity that is the IP, told to the seam.
 */
export class IdentityWarnings {
  private userWarned = false;

  constructor(private readonly logger: Logger) {}

  /** `identity` once it is known, checked; a promise when it is one. */
  checked(keys: readonly KeySource[], identity: string | Promise<string>, call: Checked): string | Promise<string> {
    if (typeof identity !== 'string') return identity.then((known) => this.checked(keys, known, call));
    const { request, context, seam } = call;
    if (request.headers.authorization !== undefined) this.checkUser(keys, identity, context);
    if (seam.limitedByIp !== undefined && identity.startsWith('ip:')) seam.limitedByIp(request);
    return identity;
  }

  /** Checks one policy's identity for a request with `Authorization`, until the warning is given. */
  private checkUser(keys: readonly KeySource[], identity: string, context: ExecutionContext): void {
    if (this.userWarned || identity.startsWith('user:') || !keys.includes('user')) return;
    this.userWarned = true;
    this.logger.warn(userNotYetSet(routeName(context)));
  }
}
