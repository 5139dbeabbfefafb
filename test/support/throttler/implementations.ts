/**
 * The two implementations of @nestjs/throttler's surface that the throttler suites run against:
 * the real `@nestjs/throttler` (NT 6.x, a dev dependency) and our entry `nestjs-ratelimit/throttler`.
 * A test that passes against NT encodes NT's behaviour; the same test against ours checks the
 * drop-in. Ours is loaded lazily (in a `beforeAll`), so a spec's NT half runs even while ours fails
 * to load, and every app class is made by a function of the loaded surface.
 *
 * On Redis, NT runs with `storage: new RateLimitThrottlerStorage({ redis, prefix })` (the first
 * step of a migration), ours with `ThrottlerModule.forRoot(options, { redis, prefix })`.
 */
import { randomUUID } from 'node:crypto';
import * as common from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import * as core from '@nestjs/core';
import type * as nt from '@nestjs/throttler';
import type { Redis } from 'ioredis';

/** NT's public surface, as its users import it. */
export type ThrottlerApi = typeof nt;

let real: Promise<ThrottlerApi> | undefined;

/**
 * The real @nestjs/throttler, loaded once. Its `require`s of @nestjs/common and @nestjs/core are
 * bound to the modules imported here (see `nt-cjs-transform.cjs`): registered before NT loads.
 */
export function loadNt(): Promise<ThrottlerApi> {
  const modules: Record<string, unknown> = { '@nestjs/common': common, '@nestjs/core': core };
  (globalThis as { __nestjsForThrottler?: (id: string) => unknown }).__nestjsForThrottler = (id) => {
    if (!(id in modules)) throw new Error(`nt-cjs-transform: no module registered for ${id}`);
    return modules[id];
  };
  real ??= import('@nestjs/throttler') as Promise<ThrottlerApi>;
  return real;
}

/** What ours chooses its store with: `ThrottlerModule.forRoot(options, engine)`. */
export interface ThrottlerEngineOptions {
  redis?: unknown;
  store?: unknown;
  prefix?: string;
  failMode?: 'open' | 'closed';
  timeout?: number;
}

/** Ours: NT's surface, plus the storage on our stores and the engine argument of `forRoot`/`forRootAsync`. */
export type OursApi = ThrottlerApi & {
  RateLimitThrottlerStorage: new (options?: ThrottlerEngineOptions) => nt.ThrottlerStorage;
};

export const IMPLEMENTATIONS = ['@nestjs/throttler', 'nestjs-ratelimit/throttler'] as const;
export type ImplementationName = (typeof IMPLEMENTATIONS)[number];

export type ThrottlerStoreName = 'memory' | 'redis';

let ours: Promise<OursApi> | undefined;

/** Our entry, loaded once (it is what Jest maps `nestjs-ratelimit/throttler` to). */
export function loadOurs(): Promise<OursApi> {
  ours ??= import('nestjs-ratelimit/throttler') as unknown as Promise<OursApi>;
  return ours;
}

/** A loaded implementation on a store: its surface, and `forRoot`/`forRootAsync` bound to the store. */
export interface Loaded {
  name: ImplementationName;
  store: ThrottlerStoreName;
  api: ThrottlerApi;
  forRoot(options: nt.ThrottlerModuleOptions): DynamicModule;
  forRootAsync(options: nt.ThrottlerAsyncOptions): DynamicModule;
}

type EngineForRoot = (options: nt.ThrottlerModuleOptions, engine?: ThrottlerEngineOptions) => DynamicModule;
type EngineForRootAsync = (options: nt.ThrottlerAsyncOptions, engine?: ThrottlerEngineOptions) => DynamicModule;

/**
 * Loads `name` for `store`. On Redis, each call of `forRoot` gets a prefix of its own on the
 * client `redis()` gives (the caller's, never closed here).
 */
export async function load(name: ImplementationName, store: ThrottlerStoreName, redis?: () => Redis): Promise<Loaded> {
  const prefix = () => `nt-compat-${randomUUID()}:`;
  const client = () => {
    if (!redis) throw new Error('a Redis target needs the test Redis client');
    return redis();
  };
  if (name === '@nestjs/throttler') {
    const nt = await loadNt();
    if (store === 'memory') {
      return {
        name,
        store,
        api: nt,
        forRoot: (options) => nt.ThrottlerModule.forRoot(options),
        forRootAsync: (options) => nt.ThrottlerModule.forRootAsync(options),
      };
    }
    const { RateLimitThrottlerStorage } = await loadOurs();
    const withStorage = (options: nt.ThrottlerModuleOptions): nt.ThrottlerModuleOptions => ({
      ...(Array.isArray(options) ? { throttlers: options } : options),
      storage: new RateLimitThrottlerStorage({ redis: client(), prefix: prefix() }),
    });
    return {
      name,
      store,
      api: nt,
      forRoot: (options) => nt.ThrottlerModule.forRoot(withStorage(options)),
      forRootAsync: ({ useFactory, ...rest }) => {
        if (!useFactory) throw new Error('NT on Redis: only the useFactory form is wired here');
        return nt.ThrottlerModule.forRootAsync({
          ...rest,
          useFactory: async (...args: unknown[]) => withStorage(await useFactory(...args)),
        });
      },
    };
  }
  const api = await loadOurs();
  // typed as NT's (one argument): ours takes the engine too
  const forRoot: EngineForRoot = api.ThrottlerModule.forRoot;
  const forRootAsync: EngineForRootAsync = api.ThrottlerModule.forRootAsync;
  const engine = (): ThrottlerEngineOptions | undefined =>
    store === 'redis' ? { redis: client(), prefix: prefix() } : undefined;
  return {
    name,
    store,
    api,
    forRoot: (options) => forRoot.call(api.ThrottlerModule, options, engine()),
    forRootAsync: (options) => forRootAsync.call(api.ThrottlerModule, options, engine()),
  };
}

/** `ms` of real time. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
