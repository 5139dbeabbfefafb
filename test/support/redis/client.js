// @ts-check
import { Redis } from 'ioredis';

/** The loopback address every test server binds to, never a shared port such as 6379. */
export const HOST = '127.0.0.1';

/**
 * Runs `use` on a fresh ioredis client of the server on `port`, then disconnects it. The client
 * neither retries nor reconnects, and the whole call, connecting included, rejects after
 * `timeoutMs`: a frozen (SIGSTOP) server accepts connections and never answers.
 * @template T
 * @param {number} port
 * @param {(client: Redis) => Promise<T>} use
 * @param {number} [timeoutMs]
 * @returns {Promise<T>}
 */
export async function withRedis(port, use, timeoutMs = 5_000) {
  const client = new Redis({
    host: HOST,
    port,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    disableClientInfo: true,
  });
  // a failure also rejects connect() or the command, where the caller handles it
  client.on('error', () => {});
  const work = client.connect().then(() => use(client));
  // after a timeout, `work` rejects too (the client is gone): that rejection is not news
  work.catch(() => {});
  /** @type {NodeJS.Timeout | undefined} */
  let timer;
  /** @type {Promise<never>} */
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`Redis on port ${port} did not answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/**
 * Sends one command to the server on `port` over a fresh connection (see `withRedis`) and returns
 * its reply as ioredis decodes it: strings, numbers, null, arrays of those. An error reply rejects.
 * @param {number} port
 * @param {(string | number)[]} args the command and its arguments, e.g. `['SENTINEL', 'FAILOVER', name]`
 * @param {number} [timeoutMs]
 * @returns {Promise<unknown>}
 */
export function redisCommand(port, [command, ...args], timeoutMs = 5_000) {
  return withRedis(port, (client) => client.call(String(command), ...args), timeoutMs);
}

/**
 * `field:value` lines of INFO or CLUSTER INFO.
 * @param {unknown} text
 * @returns {Record<string, string>}
 */
export function parseInfo(text) {
  /** @type {Record<string, string>} */
  const fields = {};
  for (const line of String(text).split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1);
  }
  return fields;
}
