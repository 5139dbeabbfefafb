import type { Cluster, Redis } from 'ioredis';
import { type RedisPort, type RedisServer, SlotMoving } from './redis-port.js';

type Args = readonly (string | number)[];

/** Sends a command on an ioredis connection or Cluster client. */
function send(on: Redis | Cluster, [command, ...args]: Args): Promise<unknown> {
  return on.call(String(command), ...args);
}

/**
 * The port of an ioredis client (`Redis`, single server or Sentinel's primary, or `Cluster`), and
 * of iovalkey's, the same API. On a Cluster a script call goes straight to the master of its
 * slot on the client's own connection, so that what the master answers reaches the store at once:
 * ioredis itself answers `TRYAGAIN` by sending the call again every 100 ms (`retryDelayOnTryAgain`),
 * up to 16 times, past any timeout.
 */
export function ioredisPort(client: Redis | Cluster): RedisPort {
  const cluster = (client as Cluster).isCluster === true;
  const options = cluster ? (client as Cluster).options?.redisOptions : (client as Redis).options;
  const server = (node: Redis): RedisServer => ({
    address: cluster ? address(node) : '',
    call: (args) => send(node, args),
  });
  const nodes = cluster ? clusterNodes(client as Cluster) : undefined;
  const masterOf = (slot: number): string | undefined => (client as Cluster).slots[slot]?.[0];
  return {
    cluster,
    commandTimeout: options?.commandTimeout,
    // a single server's calls go as they are: no promise of the port's own around them
    script: cluster
      ? async (slot, args) => {
          const address = masterOf(slot);
          const master = address === undefined ? undefined : nodes!.at(address);
          if (master === undefined) return send(client, args);
          try {
            return await send(master, args);
          } catch (error) {
            return redirected(client as Cluster, error, args, nodes!);
          }
        }
      : (_slot, args) => send(client, args),
    anyServer: (args) => send(client, args),
    onKey: (_key, args) => send(client, args),
    masters: () => (cluster ? (client as Cluster).nodes('master') : [client as Redis]).map(server),
    masterOf: (slot) => (cluster ? masterOf(slot) : undefined),
    waiting: () => client.status === 'wait',
    onReady(listener) {
      client.on('ready', listener);
      return () => void client.off('ready', listener);
    },
    keepConnected: () => (cluster ? keepConnected(client as Cluster, nodes!) : () => undefined),
  };
}

/** A Cluster node's address, `host:port`, as the client's slots name it. */
const address = (node: Redis) => `${node.options.host ?? ''}:${node.options.port ?? ''}`;

/** The nodes of a Cluster client, as the port reaches them. */
interface ClusterNodes {
  /** The client's connection to the node at `address` (`host:port`), if it knows the node. */
  at(address: string): Redis | undefined;
  /**
   * Has the client learn the slots again: resolves when it has (or could not), one refresh for all
   * who ask meanwhile. iovalkey resolves it at once when a refresh of its own is under way.
   */
  learn(): Promise<void>;
}

function clusterNodes(cluster: Cluster): ClusterNodes {
  let learning: Promise<void> | undefined;
  return {
    at: (wanted) => cluster.nodes('all').find((node) => address(node) === wanted),
    learn: () =>
      (learning ??= new Promise((resolve) =>
        cluster.refreshSlotsCache(() => {
          learning = undefined;
          resolve();
        }),
      )),
  };
}

/** When the client learns the slots again after its nodes changed, ms after the change. */
const RELEARN_AT_MS = [250, 500, 1_000, 2_000, 4_000, 8_000, 16_000];

/**
 * Connects every node the Cluster client knows as soon as it knows it, replicas included, until
 * the function returned is called. The client itself connects to a node when it first sends to
 * it: the first calls on a replica that a failover made master would wait for a connection and
 * its ready check besides the failover's own pause (3 to 28 ms more, measured under load, against
 * a timeout of 100 ms).
 *
 * A replica must be known to be connected, and Redis leaves out of `CLUSTER SLOTS` a replica that
 * has not replicated anything yet: a new cluster's replicas for a moment, and the old master of a
 * failover while it starts to follow the new one, when the client learns the slots on the
 * failover's `MOVED` (the client then drops it). A failover that makes such a node master finds
 * it unknown: the calls that meet it wait for the client to learn the slots and connect (95 ms
 * more, measured under load), and the client learns the slots only when a call meets `MOVED`. So
 * the client learns them again 0.25, 0.5, 1, 2, 4, 8 and 16 s after it is ready (when the store
 * starts using it, or later) and after it drops a node (seven `CLUSTER SLOTS` per change of its
 * nodes): a failover's old master was listed again between 0.25 and 1 s after it was dropped,
 * measured under load.
 */
function keepConnected(cluster: Cluster, nodes: ClusterNodes): () => void {
  const connect = (node: Redis) => {
    if (node.status === 'wait') node.connect().catch(() => undefined);
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  /** The rounds under way: a change of nodes starts them over, and the function returned ends them. */
  let rounds = 0;
  const learnAgain = (round = 0, these = ++rounds) => {
    clearTimeout(timer);
    timer = setTimeout(
      () => {
        void nodes.learn().then(() => {
          if (these === rounds && round + 1 < RELEARN_AT_MS.length) learnAgain(round + 1, these);
        });
      },
      RELEARN_AT_MS[round] - (RELEARN_AT_MS[round - 1] ?? 0),
    );
    timer.unref();
  };
  const changed = () => learnAgain();
  cluster.on('+node', connect);
  cluster.on('-node', changed);
  // a client left to connect on its first call (lazyConnect) is left alone until it is ready
  cluster.on('ready', changed);
  cluster.nodes('all').forEach(connect);
  if (cluster.status === 'ready') learnAgain();
  return () => {
    cluster.off('+node', connect);
    cluster.off('-node', changed);
    cluster.off('ready', changed);
    // a round whose slots are being learned stops there
    rounds++;
    clearTimeout(timer);
  };
}

/**
 * What a call sent straight to a slot's master does when it failed there: the slot has another
 * master (`MOVED`: the call goes to it, and through the client's routing if it fails there again
 * for want of a connection or a moved slot; the client learns the new owners meanwhile, and a
 * master it does not know yet is waited for), the slot is being moved and the call's keys are no
 * longer here (`ASK`: to the importing master, after `ASKING`), or are on both sides (`TRYAGAIN`,
 * also from the importing master); the connection closed under it (the client dropped the node
 * after a failover): through the client's routing, as the client itself would send it again.
 *
 * @throws SlotMoving on `TRYAGAIN`
 */
async function redirected(cluster: Cluster, error: unknown, args: Args, nodes: ClusterNodes): Promise<unknown> {
  if (!(error instanceof Error)) throw error;
  if (error.name !== 'ReplyError') return send(cluster, args);
  const [code, , address] = error.message.split(' ');
  if (code === 'TRYAGAIN') throw new SlotMoving();
  if (code === 'MOVED') {
    // straight to the master the reply names, while the client learns the new owners: during a
    // failover a node may list the slot as unserved for a moment, and a call that waits for the
    // client's map waits with it. A master the client does not know (a replica that its map
    // left out, as Redis lists a replica with no replication offset yet) it knows once it has
    // learned them: sent through the client's routing meanwhile, the call would meet MOVED again
    // and a connection still to make (45 to 65 ms more, measured under load)
    const learned = nodes.learn();
    let owner = nodes.at(address);
    if (owner === undefined) {
      await learned;
      owner = nodes.at(address);
    }
    if (owner === undefined) return send(cluster, args);
    try {
      return await send(owner, args);
    } catch (moved) {
      if (moved instanceof Error && moved.name === 'ReplyError' && !moved.message.startsWith('MOVED')) throw moved;
      return send(cluster, args);
    }
  }
  if (code !== 'ASK') throw error;
  const importing = nodes.at(address);
  if (importing === undefined) return send(cluster, args);
  // ASKING lets the next command on this connection in: the call follows it at once
  importing.asking().catch(() => undefined);
  try {
    return await send(importing, args);
  } catch (asked) {
    if (asked instanceof Error && asked.message.startsWith('TRYAGAIN')) throw new SlotMoving();
    throw asked;
  }
}
