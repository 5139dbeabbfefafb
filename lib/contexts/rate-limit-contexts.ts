import { Inject, Injectable } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { RATE_LIMIT_OPTIONS } from '../rate-limit.constants.js';
import type { ContextType, ErrorFormat } from '../rate-limit-options.interface.js';
import { GraphqlRateLimitContext } from './graphql.context.js';
import { HttpRateLimitContext } from './http.context.js';
import type { RateLimitContext } from './rate-limit-context.js';
import { RpcRateLimitContext } from './rpc.context.js';
import { WsRateLimitContext } from './ws.context.js';

/** The module's options the seams read: the kinds limited, and the form of an HTTP refusal (default `'nest'`). */
interface SeamOptions {
  contexts: readonly ContextType[];
  errorFormat?: ErrorFormat;
}

/**
 * Makes the seam of a kind of context. Those of gateways and microservices import
 * `@nestjs/websockets` and `@nestjs/microservices` as they are made: optional peers, which an
 * app without gateways or microservices lacks.
 */
const SEAMS: Record<
  ContextType,
  (adapterHost: HttpAdapterHost, options: SeamOptions) => RateLimitContext | Promise<RateLimitContext>
> = {
  http: (adapterHost, { errorFormat }) => new HttpRateLimitContext(adapterHost, errorFormat),
  graphql: (adapterHost) => new GraphqlRateLimitContext(adapterHost),
  ws: () => WsRateLimitContext.load(),
  rpc: () => RpcRateLimitContext.load(),
};

/**
 * The seam for each kind of Nest context the module limits, by `context.getType()`: the kinds in
 * the module's `contexts` option, made on first use. A kind with no seam is not limited: the
 * guard lets its requests through.
 *
 * @example
 * // an app's own seam for microservices (say, to read identity from message headers)
 * app.get(RateLimitContexts).use('rpc', new TenantRpcContext());
 */
@Injectable()
export class RateLimitContexts {
  private readonly seams = new Map<string, RateLimitContext>();
  private readonly pending = new Map<string, Promise<RateLimitContext>>();

  constructor(
    @Inject(RATE_LIMIT_OPTIONS) private readonly options: SeamOptions,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  /** The seam of a kind of context once it is made; `undefined` before, and for kinds not limited. */
  for(type: string): RateLimitContext | undefined {
    return this.seams.get(type);
  }

  /** The seam of a kind of context, made now if it is limited and not made yet; `undefined` when it is not limited. */
  async load(type: string): Promise<RateLimitContext | undefined> {
    const made = this.seams.get(type);
    if (made !== undefined || !this.options.contexts.includes(type as ContextType)) return made;
    let pending = this.pending.get(type);
    if (pending === undefined) {
      pending = Promise.resolve(SEAMS[type as ContextType](this.adapterHost, this.options));
      this.pending.set(type, pending);
    }
    const seam = await pending;
    // a seam the app set with use() while this one was on its way wins
    if (!this.seams.has(type)) this.seams.set(type, seam);
    return this.seams.get(type);
  }

  /** Limits a kind of context through the app's own seam, in place of the module's (and whatever `contexts` says). */
  use(type: string, seam: RateLimitContext): void {
    this.seams.set(type, seam);
  }
}
