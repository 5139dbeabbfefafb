/** One server of the client (a Cluster's master), as the store talks to it. */
export interface RedisServer {
  /** `host:port` on a Cluster (how its slots name it); '' for a single server or Sentinel's primary. */
  readonly address: string;
  /** Sends a command to this server: its reply, or a rejection (a server's reply error has `name` `'ReplyError'`). */
  call(args: readonly (string | number)[]): Promise<unknown>;
}

/**
 * What `RedisStore` needs of a Redis client, whichever package made it (see `redisPortOf`): the
 * adapters (`ioredis-port.ts`, `node-redis-port.ts`) are the one place that knows each client's API. A server's error replies reject
 * with an `Error` whose `name` is `'ReplyError'` and whose message is the reply.
 */
export interface RedisPort {
  /** Whether the client is a Cluster client. */
  readonly cluster: boolean;
  /**
   * Sends a script command (`FCALL`, `EVALSHA`, `EVAL`) whose keys are all in `slot`: on a
   * Cluster, to the slot's master, following a slot that moved (`MOVED`) or is being moved with
   * its keys no longer there (`ASK`).
   *
   * @throws SlotMoving when the slot is being moved and the keys are on both masters (`TRYAGAIN`)
   */
  script(slot: number, args: readonly (string | number)[]): Promise<unknown>;
  /** Sends a command with no key to any server that holds keys (the `TIME` probe). */
  anyServer(args: readonly (string | number)[]): Promise<unknown>;
  /** Sends a command on keys of one hash slot, the first being `key`, to the server that holds them. */
  onKey(key: string, args: readonly (string | number)[]): Promise<unknown>;
  /** The servers that hold the client's keys: every master a Cluster knows (none before it first connected), or the one server. */
  masters(): RedisServer[];
  /** The address of the master of `slot`, as the Cluster client last learned it; `undefined` before it knows, and on a single server. */
  masterOf(slot: number): string | undefined;
  /** Whether the client is left to connect on its first command (ioredis `lazyConnect`, a node-redis client not yet `connect`ed). */
  waiting(): boolean;
  /** Calls `listener` each time the client is ready after connecting (again); the function returned stops it. */
  onReady(listener: () => void): () => void;
  /**
   * Has the client keep a connection to every server it knows, a Cluster's replicas included, so
   * that a failover's new master answers the calls sent to it at once; the function returned
   * stops it. A no-op where the client does so itself (node-redis connects to every master it learns of).
   */
  keepConnected(): () => void;
  /** The timeout the client sets on each command, ms, if any (see `clientCommandTimeout`). */
  readonly commandTimeout: number | undefined;
}

/**
 * A call that met a hash slot being moved from one master to another with its keys on both sides
 * (`TRYAGAIN`): no call on several of those keys can run until the move is over, while a call on
 * one key can, where the key is. Thrown by the port for `RedisStore` to decide the keys one by
 * one; never a store error.
 */
export class SlotMoving extends Error {
  override readonly name = 'SlotMoving';

  constructor() {
    super('the hash slot is being moved: its keys are on two masters');
  }
}

/** A server's error reply as the port rejects with it: an `Error` named `'ReplyError'`. */
export function replyError(message: string): Error {
  const error = new Error(message);
  error.name = 'ReplyError';
  return error;
}
