import type { ServerResponse } from 'node:http';
import {
  type CanActivate,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Get,
  Injectable,
  Module,
  type NestInterceptor,
  Query,
  type Type,
  UseGuards,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { Args, GqlExecutionContext, Query as GraphqlQuery, Resolver } from '@nestjs/graphql';
import { MessagePattern } from '@nestjs/microservices';
import { type Observable, of } from 'rxjs';
import { RateLimit, RateLimitModule, type RateLimitModuleOptions, type RateLimitPolicy } from '../../lib/index.js';
import type { LimitedRequest } from '../../lib/keys/identity.js';
import { holds } from './concurrency-apps.js';

/**
 * The harness of `test/e2e/request-ends.e2e-spec.ts`: routes under one `concurrency` slot per
 * client (`oneSlot`) whose requests end in the ways the engine must hear of: an HTTP client that
 * hangs up while the guard still decides (its key function answers when the test says,
 * `askedKeys`), an HTTP request held until the test ends it (`holds`) while Redis is cut off, a
 * TCP message a later guard refuses (`RefuseFlagged`) or a global interceptor answers from its
 * cache (`AnswersFromCache`), a GraphQL field a later guard refuses, and a GraphQL operation under
 * a module-wide slot whose second field is held.
 */

/** The policy under test, keyed by `key`: one request in flight per client; a slot not given back is reclaimed after 5 minutes. */
export const oneSlot = (key: RateLimitPolicy['key']): RateLimitPolicy => ({
  name: 'exports',
  algorithm: 'concurrency',
  limit: 1,
  key,
  lease: '5m',
});

// ---------------------------------------------------------------------------------------------
// HTTP: a key function the test answers

/** A request whose key the guard asked: its Node response, and the client the test answers with. */
export interface AskedKey {
  response: ServerResponse;
  answer(client: string): void;
}

/**
 * The key function of the HTTP routes: the client named in `x-client`. A request that names
 * itself in `x-id` is told to the test (`asked`); with `x-key: later` as well, its key is a
 * promise the test resolves, so the guard decides it when the test says.
 */
export class AskedKeys {
  private readonly waiting = new Map<string, (asked: AskedKey) => void>();
  private readonly asks = new Map<string, Promise<AskedKey>>();

  readonly key = (context: ExecutionContext): string | Promise<string> => {
    const http = context.switchToHttp();
    const { headers } = http.getRequest<LimitedRequest>();
    const client = String(headers['x-client']);
    const id = headers['x-id'];
    if (typeof id !== 'string') return client;
    // Express's response is Node's; Fastify's reply holds it as `raw`
    const reply = http.getResponse<ServerResponse | { raw: ServerResponse }>();
    const response = 'raw' in reply ? reply.raw : reply;
    if (headers['x-key'] !== 'later') {
      this.told(id, { response, answer: () => undefined });
      return client;
    }
    return new Promise<string>((answer) => this.told(id, { response, answer }));
  };

  /** Resolves once the guard asked the key of request `id`. */
  asked(id: string): Promise<AskedKey> {
    let asked = this.asks.get(id);
    if (asked === undefined)
      this.asks.set(id, (asked = new Promise<AskedKey>((resolve) => this.waiting.set(id, resolve))));
    return asked;
  }

  private told(id: string, asked: AskedKey): void {
    void this.asked(id);
    this.waiting.get(id)!(asked);
  }
}

/** The one `AskedKeys` of the HTTP routes here. */
export const askedKeys = new AskedKeys();

/** Two routes sharing the client's one slot: one answers at once, the other when the test ends it (`holds`). */
@Controller('exports')
export class OneSlotController {
  @RateLimit(oneSlot(askedKeys.key))
  @Get()
  run(@Query('id') id: string) {
    return { id };
  }

  @RateLimit(oneSlot(askedKeys.key))
  @Get('held')
  async held(@Query('id') id: string) {
    await holds.hold(id);
    return { id };
  }
}

// ---------------------------------------------------------------------------------------------
// What runs after the module's guard: a guard of the handler, a global interceptor

/** A TCP message's payload: its client, and what a guard or an interceptor after the module's guard makes of it. */
export interface WorkMessage {
  client: string;
  /** `RefuseFlagged` refuses it. */
  refuse?: boolean;
  /** `AnswersFromCache` answers it without its handler. */
  cached?: boolean;
}

/**
 * An app's own guard on a handler (an auth guard, say), which Nest runs after the module's global
 * guard: it refuses a message flagged `refuse`, and a GraphQL operation sent with `x-refuse: yes`.
 */
@Injectable()
export class RefuseFlagged implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    if (context.getType() === 'rpc') return context.switchToRpc().getData<WorkMessage>().refuse !== true;
    const { req } = GqlExecutionContext.create(context).getContext<{ req: LimitedRequest }>();
    return req.headers['x-refuse'] !== 'yes';
  }
}

/**
 * A global interceptor that answers a message flagged `cached` from its cache without calling the
 * handler (as Nest's `CacheInterceptor` does): global, it runs before any of the route's own.
 */
@Injectable()
export class AnswersFromCache implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return context.switchToRpc().getData<WorkMessage>().cached === true ? of('cached') : next.handle();
  }
}

/** A message under the client's one slot, behind `RefuseFlagged`; `AnswersFromCache` is the app's (see `workModule`). */
@Controller()
export class WorkMessages {
  @RateLimit(oneSlot((context) => context.switchToRpc().getData<WorkMessage>().client))
  @UseGuards(RefuseFlagged)
  @MessagePattern('work')
  work() {
    return 'done';
  }
}

/** A microservice's module: `WorkMessages` under `RateLimitModule.forRoot(options)`, `AnswersFromCache` global. */
export function workModule(options: RateLimitModuleOptions): Type {
  @Module({
    imports: [RateLimitModule.forRoot(options)],
    controllers: [WorkMessages],
    providers: [{ provide: APP_INTERCEPTOR, useClass: AnswersFromCache }],
  })
  class WorkModule {}
  return WorkModule;
}

// ---------------------------------------------------------------------------------------------
// GraphQL (Apollo on Express)

/** A field with a slot of its own (`x-client`'s), behind `RefuseFlagged`. */
@Resolver()
export class GuardedResolver {
  @RateLimit(oneSlot('header:x-client'))
  @UseGuards(RefuseFlagged)
  @GraphqlQuery(() => String)
  guarded(): string {
    return 'done';
  }
}

/** Two root fields of no policy of their own, for a module-wide one: `slow` is held until the test ends it. */
@Resolver()
export class FastAndSlowResolver {
  @GraphqlQuery(() => String)
  fast(): string {
    return 'fast';
  }

  @GraphqlQuery(() => String)
  async slow(@Args('id', { type: () => String }) id: string): Promise<string> {
    await holds.hold(id);
    return id;
  }
}
