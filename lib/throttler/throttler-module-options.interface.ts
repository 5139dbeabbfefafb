import type { ExecutionContext, ModuleMetadata, Type } from '@nestjs/common';
import type { ThrottlerStorageRecord } from './throttler-storage-record.interface.js';
import type { ThrottlerStorage } from './throttler-storage.interface.js';

/**
 * What a refusal's `errorMessage` and `throwThrottlingException` are told: the storage's answer
 * (seconds) with the limit, the `ttl` (milliseconds), the key and the tracker. Kept here (NT
 * keeps it in its guard's interface file, which exports it too) so the two files do not import
 * each other.
 */
export interface ThrottlerLimitDetail extends ThrottlerStorageRecord {
  ttl: number;
  limit: number;
  key: string;
  tracker: string;
}

/**
 * A value, or a function of the execution context that gives it (or a promise of it), read per request.
 *
 * @example ttl: (context) => (context.switchToHttp().getRequest().user?.premium ? 1_000 : 60_000)
 */
export type Resolvable<T extends number | string | boolean> = T | ((context: ExecutionContext) => T | Promise<T>);

/**
 * One throttler: at most `limit` hits per `ttl` milliseconds per route per tracker.
 *
 * @example { name: 'short', ttl: 1_000, limit: 3 }
 */
export interface ThrottlerOptions {
  /** Its name (header suffix, `@Throttle`/`@SkipThrottle` key); default `'default'`. */
  name?: string;
  /** Hits admitted per `ttl`. */
  limit: Resolvable<number>;
  /** The window, milliseconds (not seconds: see `seconds()`, `minutes()`). */
  ttl: Resolvable<number>;
  /** How long a refusal blocks the tracker, milliseconds; default `ttl`. 0 or less: no block, refused only while full. */
  blockDuration?: Resolvable<number>;
  /** User agents never limited by this throttler. */
  ignoreUserAgents?: RegExp[];
  /** `true`: this throttler does not apply to the request. */
  skipIf?: (context: ExecutionContext) => boolean;
  /** Who the request is counted for; default the client's IP. */
  getTracker?: ThrottlerGetTrackerFunction;
  /** The storage key of a tracker on a route; default SHA-256 of `Class-handler-name-tracker`. */
  generateKey?: ThrottlerGenerateKeyFunction;
  /** `false`: no `X-RateLimit-*` / `Retry-After` headers from this throttler. */
  setHeaders?: boolean;
}

/**
 * `ThrottlerModule.forRoot`'s options: the throttlers, or an object with them and what applies to all.
 *
 * @example { throttlers: [{ ttl: 60_000, limit: 10 }], errorMessage: 'Slow down' }
 */
export type ThrottlerModuleOptions =
  | Array<ThrottlerOptions>
  | {
      /** User agents never limited. */
      ignoreUserAgents?: RegExp[];
      /** `true`: no throttler applies to the request. */
      skipIf?: (context: ExecutionContext) => boolean;
      /** Who a request is counted for, for throttlers without their own. */
      getTracker?: ThrottlerGetTrackerFunction;
      /** The storage key, for throttlers without their own. */
      generateKey?: ThrottlerGenerateKeyFunction;
      /** A refusal's message, or a function making it. */
      errorMessage?: string | ((context: ExecutionContext, throttlerLimitDetail: ThrottlerLimitDetail) => string);
      /** Where hits are counted; wins over the engine `forRoot` is given. */
      storage?: ThrottlerStorage;
      /** IPv6 prefix length the default tracker groups clients by (0 to 128, default 64). */
      ipv6SubnetPrefix?: number;
      throttlers: Array<ThrottlerOptions>;
      /** `false`: no rate-limit headers, for throttlers that do not say. */
      setHeaders?: boolean;
    };

/** A class whose `createThrottlerOptions()` gives the module's options (`forRootAsync`'s `useClass`/`useExisting`). */
export interface ThrottlerOptionsFactory {
  createThrottlerOptions(): Promise<ThrottlerModuleOptions> | ThrottlerModuleOptions;
}

/**
 * `ThrottlerModule.forRootAsync`'s options: one of `useFactory` (with `inject`), `useClass`, `useExisting`.
 *
 * @example { imports: [ConfigModule], inject: [ConfigService], useFactory: (config: ConfigService) => [{ ttl: config.get('TTL'), limit: 10 }] }
 */
export interface ThrottlerAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useExisting?: Type<ThrottlerOptionsFactory>;
  useClass?: Type<ThrottlerOptionsFactory>;
  useFactory?: (...args: any[]) => Promise<ThrottlerModuleOptions> | ThrottlerModuleOptions;
  inject?: any[];
}

/** Who a request is counted for: its IP by default. May be async. */
export type ThrottlerGetTrackerFunction = (
  req: Record<string, any>,
  context: ExecutionContext,
) => Promise<string> | string;

/** The storage key of a tracker for one throttler on one route. */
export type ThrottlerGenerateKeyFunction = (
  context: ExecutionContext,
  trackerString: string,
  throttlerName: string,
) => string;
