import { createHash } from 'node:crypto';
import {
  type CanActivate,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type OnModuleInit,
  Optional,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { RateLimitContexts } from '../contexts/rate-limit-contexts.js';
import { invalidThrottlerValue, noThrottlers } from '../rate-limit.messages.js';
import { DEFAULT_IPV6_SUBNET_PREFIX, normalizeIp } from './ip.js';
import type {
  Resolvable,
  ThrottlerGenerateKeyFunction,
  ThrottlerGetTrackerFunction,
  ThrottlerModuleOptions,
  ThrottlerOptions,
} from './throttler-module-options.interface.js';
import type { ThrottlerStorage } from './throttler-storage.interface.js';
import { ThrottlerTransports } from './throttler-transports.js';
import {
  THROTTLER_BLOCK_DURATION,
  THROTTLER_KEY_GENERATOR,
  THROTTLER_LIMIT,
  THROTTLER_SKIP,
  THROTTLER_TRACKER,
  THROTTLER_TTL,
} from './throttler.constants.js';
import { InjectThrottlerOptions, InjectThrottlerStorage } from './throttler.decorator.js';
import { ThrottlerException, throttlerMessage } from './throttler.exception.js';
import type { ThrottlerLimitDetail, ThrottlerRequest } from './throttler.guard.interface.js';
import { THROTTLER_CONTEXTS } from './throttler.providers.js';

/** A throttler's header suffix: none for `default`, `-<name>` for any other. */
const suffixOf = (name: string | undefined): string => (name === 'default' ? '' : `-${name}`);

/**
 * @nestjs/throttler's guard on our engine: each throttler `forRoot` declares, in `ttl` order,
 * counts the request once in the storage under a key per route per tracker; the first one that
 * refuses throws (earlier ones keep their charge, later ones are not charged). Its protected
 * methods are @nestjs/throttler's, with its signatures, so subclasses keep working.
 *
 * Unlike @nestjs/throttler's, it limits GraphQL resolvers (the operation's HTTP request and
 * response), gateways (the connection's address; the refusal is the gateway's `exception`
 * event) and microservices (one bucket per route unless `getTracker` says; the refusal an
 * `RpcException`) without a subclass, and sets headers through the HTTP adapter on a response
 * without `header` or `setHeader`.
 *
 * @example providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }]
 */
@Injectable()
export class ThrottlerGuard implements CanActivate, OnModuleInit {
  protected headerPrefix = 'X-RateLimit';
  protected logger = new Logger('ThrottlerGuard');
  protected errorMessage = throttlerMessage;
  protected throttlers!: Array<ThrottlerOptions>;
  protected commonOptions!: Pick<
    ThrottlerOptions,
    'skipIf' | 'ignoreUserAgents' | 'getTracker' | 'generateKey' | 'setHeaders'
  >;
  protected ipv6SubnetPrefix = DEFAULT_IPV6_SUBNET_PREFIX;

  /** The transports' seams `ThrottlerModule` provides (a property: subclasses keep NT's constructor). */
  @Optional()
  @Inject(THROTTLER_CONTEXTS)
  private readonly throttlerContexts?: RateLimitContexts;
  private readonly transports = new ThrottlerTransports(() => this.throttlerContexts);

  constructor(
    @InjectThrottlerOptions() protected readonly options: ThrottlerModuleOptions,
    @InjectThrottlerStorage() protected readonly storageService: ThrottlerStorage,
    protected readonly reflector: Reflector,
  ) {}

  /** Sorts the throttlers by `ttl` (a function-valued `ttl` last), names them (`'default'`), reads the common options. */
  async onModuleInit(): Promise<void> {
    const given = Array.isArray(this.options) ? this.options : (this.options?.throttlers ?? []);
    this.throttlers = [...given]
      .sort((a, b) => {
        if (typeof a.ttl === 'function') return 1;
        if (typeof b.ttl === 'function') return 0;
        return a.ttl - b.ttl;
      })
      .map((throttler) => ({ ...throttler, name: throttler.name ?? 'default' }));
    if (this.throttlers.length === 0) {
      this.logger.warn(noThrottlers);
    }
    if (Array.isArray(this.options) || this.options === undefined) {
      this.commonOptions = {};
    } else {
      const { skipIf, ignoreUserAgents, getTracker, generateKey, setHeaders, ipv6SubnetPrefix } = this.options;
      this.commonOptions = { skipIf, ignoreUserAgents, getTracker, generateKey, setHeaders };
      this.ipv6SubnetPrefix = ipv6SubnetPrefix ?? DEFAULT_IPV6_SUBNET_PREFIX;
    }
    this.commonOptions.getTracker ??= this.getTracker.bind(this);
    this.commonOptions.generateKey ??= this.generateKey.bind(this);
  }

  /**
   * Runs every throttler on the request, in order: skipped ones (`@SkipThrottle`, `skipIf`) pass;
   * each field of a throttler is read from the handler's `@Throttle`, else the class's, else
   * `forRoot`'s, and resolved with the context when it is a function.
   */
  async canActivate(context: ExecutionContext): Promise<boolean> {
    const handler = context.getHandler();
    const classRef = context.getClass();
    // only the first request of each kind of context waits for its seam (and its peer's import)
    const loading = this.transports.load(context.getType());
    if (loading !== undefined) await loading;
    if (await this.shouldSkip(context)) return true;
    const continues: boolean[] = [];
    for (const throttler of this.throttlers) {
      const name = throttler.name!;
      const read = <T>(key: string): T | undefined =>
        this.reflector.getAllAndOverride<T>(key + name, [handler, classRef]);
      const skipIf = throttler.skipIf ?? this.commonOptions.skipIf;
      if (read<boolean>(THROTTLER_SKIP) || skipIf?.(context)) {
        continues.push(true);
        continue;
      }
      const limit = this.toNumber(
        await this.resolveValue(context, read<Resolvable<number>>(THROTTLER_LIMIT) ?? throttler.limit),
        'limit',
        name,
      );
      const ttl = this.toNumber(
        await this.resolveValue(context, read<Resolvable<number>>(THROTTLER_TTL) ?? throttler.ttl),
        'ttl',
        name,
      );
      const blockDuration = this.toNumber(
        await this.resolveValue(
          context,
          read<Resolvable<number>>(THROTTLER_BLOCK_DURATION) ?? throttler.blockDuration ?? ttl,
        ),
        'blockDuration',
        name,
      );
      // `||` as NT: a null `getTracker`/`generateKey` falls through too
      const getTracker =
        read<ThrottlerGetTrackerFunction>(THROTTLER_TRACKER) || throttler.getTracker || this.commonOptions.getTracker!;
      const generateKey =
        read<ThrottlerGenerateKeyFunction>(THROTTLER_KEY_GENERATOR) ||
        throttler.generateKey ||
        this.commonOptions.generateKey!;
      try {
        continues.push(
          await this.handleRequest({ context, limit, ttl, throttler, blockDuration, getTracker, generateKey }),
        );
      } catch (error) {
        // a subclass's own 429, or a storage's 503, in the transport's form too
        throw this.transports.refusal(context, error);
      }
    }
    return continues.every(Boolean);
  }

  /** `true`: no throttler looks at the request. Override to skip by request. */
  protected async shouldSkip(_context: ExecutionContext): Promise<boolean> {
    return false;
  }

  /**
   * One throttler's part of the request: ignored user agents pass; else the tracker's key is
   * counted in the storage, the headers set, and a refusal thrown.
   */
  protected async handleRequest(requestProps: ThrottlerRequest): Promise<boolean> {
    const { context, limit, ttl, throttler, blockDuration, getTracker, generateKey } = requestProps;
    const { req, res } = this.getRequestResponse(context);
    const ignoreUserAgents = throttler.ignoreUserAgents ?? this.commonOptions.ignoreUserAgents;
    if (Array.isArray(ignoreUserAgents)) {
      const userAgent = (req?.headers as Record<string, string> | undefined)?.['user-agent'];
      if (ignoreUserAgents.some((pattern) => pattern.test(userAgent as string))) return true;
    }
    const tracker = await getTracker(req, context);
    const key = generateKey(context, tracker, throttler.name!);
    const record = await this.storageService.increment(key, ttl, limit, blockDuration, throttler.name!);
    const { totalHits, timeToExpire, isBlocked, timeToBlockExpire } = record;
    const suffix = suffixOf(throttler.name);
    const setHeaders = throttler.setHeaders ?? this.commonOptions.setHeaders ?? true;
    if (isBlocked) {
      if (setHeaders) this.setResponseHeader(res, `Retry-After${suffix}`, timeToBlockExpire);
      const detail = { limit, ttl, key, tracker, totalHits, timeToExpire, isBlocked, timeToBlockExpire };
      await this.throwThrottlingException(context, detail);
    }
    if (setHeaders) {
      this.setResponseHeader(res, `${this.headerPrefix}-Limit${suffix}`, limit);
      this.setResponseHeader(res, `${this.headerPrefix}-Remaining${suffix}`, Math.max(0, limit - totalHits));
      this.setResponseHeader(res, `${this.headerPrefix}-Reset${suffix}`, timeToExpire);
    }
    return true;
  }

  /** Who the request is counted for: its IP, IPv6 grouped by `ipv6SubnetPrefix` (see `normalizeIp`). */
  protected async getTracker(req: Record<string, any>): Promise<string> {
    return normalizeIp(req?.ip as string, this.ipv6SubnetPrefix);
  }

  /** Sets a header with `res.header`, else `res.setHeader`; a response with neither (a transport without headers) is left as it is. */
  protected setResponseHeader(res: Record<string, any>, name: string, value: string | number): void {
    const response = res as { header?: unknown; setHeader?: unknown } | undefined;
    if (typeof response?.header === 'function')
      (response.header as (n: string, v: string | number) => void)(name, value);
    else if (typeof response?.setHeader === 'function')
      (response.setHeader as (n: string, v: string | number) => void)(name, value);
  }

  /**
   * The request the tracker reads and the response headers go to. HTTP: the handler's (one
   * without `header` or `setHeader` written through the app's HTTP adapter). GraphQL: the
   * operation's HTTP request and response. Gateway: the connection's address and headers, no
   * response. Microservice: no address, no response.
   */
  protected getRequestResponse(context: ExecutionContext): { req: Record<string, any>; res: Record<string, any> } {
    return this.transports.requestResponse(context);
  }

  /** The storage key: SHA-256 (hex) of `<Class>-<handler>-<throttler name>-<tracker>`. */
  protected generateKey(context: ExecutionContext, suffix: string, name: string): string {
    const text = `${context.getClass().name}-${context.getHandler().name}-${name}-${suffix}`;
    return createHash('sha256').update(text).digest('hex');
  }

  /** Throws the refusal: a `ThrottlerException` (429), as a gateway or a microservice carries it there. */
  protected async throwThrottlingException(
    context: ExecutionContext,
    throttlerLimitDetail: ThrottlerLimitDetail,
  ): Promise<void> {
    const exception = new ThrottlerException(await this.getErrorMessage(context, throttlerLimitDetail));
    throw this.transports.refusal(context, exception);
  }

  /** The refusal's message: the options' `errorMessage` (a string, or a function of the context and the detail), else NT's. */
  protected async getErrorMessage(
    context: ExecutionContext,
    throttlerLimitDetail: ThrottlerLimitDetail,
  ): Promise<string> {
    if (Array.isArray(this.options) || !this.options?.errorMessage) return this.errorMessage;
    const { errorMessage } = this.options;
    return typeof errorMessage === 'function' ? errorMessage(context, throttlerLimitDetail) : errorMessage;
  }

  /** A resolved `limit`, `ttl` or `blockDuration` as a number (a numeric string converts); anything else is the app's error. */
  private toNumber(value: unknown, option: string, throttlerName: string): number {
    const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
    if (typeof number !== 'number' || Number.isNaN(number)) {
      throw new Error(invalidThrottlerValue(option, throttlerName, value));
    }
    return number;
  }

  private async resolveValue<T extends number | string | boolean>(
    context: ExecutionContext,
    value: Resolvable<T> | undefined,
  ): Promise<T | undefined> {
    return typeof value === 'function' ? value(context) : value;
  }
}
