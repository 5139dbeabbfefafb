import type { Cluster, Redis } from 'ioredis';

/** Whether `client` is an ioredis `Cluster` (else a `Redis`: a single server, or Sentinel's primary). */
export function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as Cluster).isCluster === true;
}

/**
 * The servers that hold `client`'s keys: every master a Cluster knows (none before it has first
 * connected), or the client itself.
 */
export function mastersOf(client: Redis | Cluster): Redis[] {
  return isCluster(client) ? client.nodes('master') : [client];
}
