import { type RedisPort, type RedisServer, replyError, SlotMoving } from './redis-port.js';

type Args = readonly (string | number)[];

/** An event emitter, as node-redis's clients are. */
interface Emitter {
  on(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** A node-redis v5 client of one server (`createClient`), as the port uses it. */
interface NodeRedisSingle extends Emitter {
  readonly isOpen: boolean;
  sendCommand(args: string[]): Promise<unknown>;
}

/** A node-redis v5 Sentinel client (`createSentinel`): commands go to the primary. */
interface NodeRedisSentinel extends Emitter {
  readonly isOpen: boolean;
  getMasterNode(): unknown;
  sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

/** A master as node-redis's Cluster client knows it, and its client once it has connected. */
interface NodeRedisMaster {
  readonly address: string;
  readonly client?: { readonly isReady: boolean };
}

/** How often at most a node-redis Cluster client is asked to learn its slots again after a failed call, ms. */
const REDISCOVER_EVERY_MS = 100;

/** A node-redis v5 Cluster client (`createCluster`). */
interface NodeRedisCluster extends Emitter {
  readonly isOpen: boolean;
  readonly masters: readonly NodeRedisMaster[];
  getSlotMaster(slot: number): NodeRedisMaster | undefined;
  nodeClient(node: NodeRedisMaster): Promise<NodeRedisSingle> | NodeRedisSingle;
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

/** A node-redis v5 client: of one server, of a Cluster, or through Sentinel. */
export type NodeRedisClient = NodeRedisSingle | NodeRedisSentinel | NodeRedisCluster;

/** Whether `client` is a node-redis v5 client (see `NodeRedisClient`). */
export function isNodeRedis(client: object): client is NodeRedisClient {
  const candidate = client as Partial<NodeRedisSingle>;
  return typeof candidate.sendCommand === 'function' && typeof candidate.isOpen === 'boolean';
}

const isCluster = (client: NodeRedisClient): client is NodeRedisCluster =>
  typeof (client as NodeRedisCluster).getSlotMaster === 'function';
const isSentinel = (client: NodeRedisClient): client is NodeRedisSentinel =>
  typeof (client as NodeRedisSentinel).getMasterNode === 'function';

/**
 * Whether `error` is of node-redis's error class `name`, found by the class's name: the package is
 * an optional peer, not imported here (and its errors' own `name` is plain `'Error'`).
 */
function isNodeRedisError(error: unknown, name: string): error is Error {
  if (typeof error !== 'object' || error === null) return false;
  for (let proto: unknown = Object.getPrototypeOf(error); proto !== null; proto = Object.getPrototypeOf(proto))
    if ((proto as { constructor?: { name?: string } }).constructor?.name === name) return true;
  return false;
}

/** A command's promise, its error replies rejecting as the port says (`replyError`), `TRYAGAIN` as `SlotMoving`. */
async function replied(reply: Promise<unknown>): Promise<unknown> {
  try {
    return await reply;
  } catch (error) {
    if (!isNodeRedisError(error, 'ErrorReply')) throw error;
    if (error.message.startsWith('TRYAGAIN')) throw new SlotMoving();
    throw replyError(error.message);
  }
}

const strings = (args: Args): string[] => args.map(String);

/**
 * The port of a node-redis v5 client. Its Cluster client routes each command by its first key
 * and follows `MOVED` and `ASK` itself; `TRYAGAIN` it hands on, as the store wants.
 */
export function nodeRedisPort(client: NodeRedisClient): RedisPort {
  if (isCluster(client)) return clusterPort(client);
  // async: a client that throws rather than rejects still rejects
  const send = isSentinel(client)
    ? async (args: Args) => replied(client.sendCommand(false, strings(args)))
    : async (args: Args) => replied(client.sendCommand(strings(args)));
  const server: RedisServer = { address: '', call: send };
  // a Sentinel client says its primary changed; a client of one server that it is ready again
  const readyEvent = isSentinel(client) ? 'topology-change' : 'ready';
  return {
    cluster: false,
    commandTimeout: undefined,
    script: (_slot, args) => send(args),
    anyServer: send,
    onKey: (_key, args) => send(args),
    masters: () => [server],
    masterOf: () => undefined,
    waiting: () => !client.isOpen,
    onReady(listener) {
      client.on(readyEvent, listener);
      return () => void client.off(readyEvent, listener);
    },
    keepConnected: () => () => undefined,
  };
}

/**
 * Has the Cluster client learn its slots again, `REDISCOVER_EVERY_MS` apart at most, from a master
 * it reaches. node-redis does so on `MOVED` alone: a call to a dead master fails, and so do the
 * calls after it to the replica that took over, until something else moves a slot. Through
 * `_slots.rediscover`, which its typings declare (not its documentation).
 */
function rediscovery(cluster: NodeRedisCluster): () => void {
  let last = -Infinity;
  return () => {
    const now = performance.now();
    if (now - last < REDISCOVER_EVERY_MS) return;
    last = now;
    const slots = (cluster as { _slots?: { rediscover?: (startWith: object) => Promise<void> } })._slots;
    const from = cluster.masters.find((master) => master.client?.isReady === true)?.client;
    if (from !== undefined && typeof slots?.rediscover === 'function') slots.rediscover(from).catch(() => undefined);
  };
}

function clusterPort(cluster: NodeRedisCluster): RedisPort {
  const rediscover = rediscovery(cluster);
  const onServer = (master: NodeRedisMaster): RedisServer => ({
    address: master.address,
    call: async (args) => replied((await cluster.nodeClient(master)).sendCommand(strings(args))),
  });
  // a script command: FCALL / EVALSHA / EVAL, its function or script, the number of keys, the keys
  const firstKey = ([, , numKeys, key]: Args): string | undefined => (Number(numKeys) > 0 ? String(key) : undefined);
  return {
    cluster: true,
    commandTimeout: undefined,
    async script(_slot, args) {
      const send = () => replied(cluster.sendCommand(firstKey(args), false, strings(args)));
      try {
        return await send();
      } catch (error) {
        // the client learned the slots after a failover and dropped the old master, failing the
        // calls still on it. They had not run: a master answers in order, and from the failover's
        // pause on it holds a call, then answers it MOVED. So they go to the new master. A call
        // whose answer a dying master lost may be charged twice: never over-admitted.
        if (isNodeRedisError(error, 'DisconnectsClientError') && cluster.isOpen) return send();
        // a master out of reach: a replica may have taken over, which the client would not learn
        if (error instanceof Error && error.name !== 'ReplyError' && !(error instanceof SlotMoving)) rediscover();
        throw error;
      }
    },
    anyServer: async (args) => replied(cluster.sendCommand(undefined, false, strings(args))),
    onKey: async (key, args) => replied(cluster.sendCommand(key, false, strings(args))),
    masters: () => (cluster.isOpen ? cluster.masters.map(onServer) : []),
    masterOf: (slot) => (cluster.isOpen ? cluster.getSlotMaster(slot)?.address : undefined),
    waiting: () => !cluster.isOpen,
    onReady(listener) {
      // the first connection, and each node's (a restarted master has lost the library)
      cluster.on('connect', listener);
      cluster.on('node-ready', listener);
      return () => {
        cluster.off('connect', listener);
        cluster.off('node-ready', listener);
      };
    },
    // the client connects to each master as it learns of it
    keepConnected: () => () => undefined,
  };
}
