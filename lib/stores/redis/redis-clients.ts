import type { Cluster, Redis } from 'ioredis';
import { ioredisPort } from './ioredis-port.js';
import { isNodeRedis, type NodeRedisClient, nodeRedisPort } from './node-redis-port.js';
import type { RedisPort } from './redis-port.js';

/**
 * A client with ioredis's API that is not ioredis's own class: iovalkey's `Redis` and `Cluster`
 * (a fork of ioredis). Known by `defineCommand`, as ioredis's are.
 */
export interface IoredisApiClient {
  readonly status: string;
  defineCommand(name: string, definition: { lua: string }): unknown;
}

/**
 * A Redis client `RedisStore` takes: an ioredis or iovalkey `Redis` or `Cluster`, or a node-redis
 * v5 client (`createClient`, `createCluster`, `createSentinel`). No package is loaded here: a
 * client is known by its shape.
 */
export type RedisClient = Redis | Cluster | IoredisApiClient | NodeRedisClient;

const ports = new WeakMap<object, RedisPort>();

/** The port of `client`, made once per client; `undefined` for anything that is not a client the store takes. */
export function redisPortOf(client: unknown): RedisPort | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  let port = ports.get(client);
  if (port !== undefined) return port;
  if (typeof (client as Redis).defineCommand === 'function') port = ioredisPort(client as Redis | Cluster);
  else if (isNodeRedis(client)) port = nodeRedisPort(client);
  else return undefined;
  ports.set(client, port);
  return port;
}

/** Whether `value` is a client `RedisStore` takes (see `RedisClient`). */
export function isRedisClient(value: unknown): value is RedisClient {
  return redisPortOf(value) !== undefined;
}
