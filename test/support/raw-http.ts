import { connect } from 'node:net';

/** What a server answered: the status code of its status line, or `'closed'` when it hung up without one. */
export type RawOutcome = number | 'closed';

/**
 * Sends `GET <target>` over a fresh TCP connection with `headers` written byte for byte: each value
 * is a Latin-1 string (one char per byte) and is not checked, so it may hold CR, LF, NUL or any
 * other byte and break the framing on purpose, which `fetch` refuses to do. Resolves with the
 * status code as soon as the status line arrives, or `'closed'` when the server hangs up first (a
 * server refusing a request it cannot parse may close before reading it all: the write then fails
 * with EPIPE or ECONNRESET); rejects on no answer within `timeoutMs`.
 */
export function rawGet(
  url: string,
  target: string,
  headers: readonly [string, string][],
  timeoutMs = 5_000,
): Promise<RawOutcome> {
  const { hostname, port } = new URL(url);
  const lines = [
    `GET ${target} HTTP/1.1`,
    `Host: ${hostname}:${port}`,
    ...headers.map(([name, value]) => `${name}: ${value}`),
  ];
  const head = Buffer.from(`${lines.join('\r\n')}\r\nConnection: close\r\n\r\n`, 'latin1');
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const timer = setTimeout(
      () => settle(new Error(`no answer within ${timeoutMs} ms to ${head.length} bytes of GET ${target.slice(0, 80)}`)),
      timeoutMs,
    );
    const settle = (outcome: RawOutcome | Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    let received = '';
    socket.on('data', (chunk) => {
      received += chunk.toString('latin1');
      const end = received.indexOf('\r\n');
      if (end === -1) return;
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(received.slice(0, end));
      settle(
        status ? Number(status[1]) : new Error(`not an HTTP status line: ${JSON.stringify(received.slice(0, end))}`),
      );
    });
    socket.on('error', (error: NodeJS.ErrnoException) => {
      settle(error.code === 'EPIPE' || error.code === 'ECONNRESET' ? 'closed' : error);
    });
    socket.on('close', () => settle('closed'));
    socket.write(head);
  });
}
