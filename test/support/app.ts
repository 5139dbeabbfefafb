import { createServer } from 'node:http';
import type { INestApplication, NestApplicationOptions, Type } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';

/** The HTTP adapters every e2e suite runs on. */
export const ADAPTERS = ['express', 'fastify'] as const;
export type AdapterName = (typeof ADAPTERS)[number];

/** A started app and a `fetch` bound to its address. */
export interface TestApp {
  app: INestApplication;
  url: string;
  get(path: string, headers?: Record<string, string>): Promise<Response>;
  close(): Promise<void>;
}

/** Server settings a suite may change; unset, each is the framework's default. */
export interface StartOptions {
  /** Largest request head (request line and headers) the server accepts, in bytes; Node's default is 16 KiB. */
  maxHeaderSize?: number;
  /**
   * Address (or CIDR) of a proxy whose `X-Forwarded-For` the framework trusts for `req.ip` (Express
   * `trust proxy`, Fastify `trustProxy`). Not a hop count: Fastify 5.12 ignores those (trusts no one).
   */
  trustProxy?: string;
}

/** Builds `module` on the named adapter and listens on a free loopback port. */
export async function startApp(module: Type, adapter: AdapterName, options: StartOptions = {}): Promise<TestApp> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const app =
    adapter === 'fastify'
      ? moduleRef.createNestApplication(fastifyAdapter(options), { logger: false })
      : moduleRef.createNestApplication(expressAdapter(options), { logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return {
    app,
    url,
    get: (path, headers = {}) => fetch(`${url}${path}`, { headers }),
    close: () => closeApp(app),
  };
}

/**
 * `app.close()`, closing keep-alive connections as they fall idle until it is done. The server
 * closes the idle ones once, when it starts closing; one busy then (a response being sent) stays
 * open after its response as long as the client keeps it (fetch: the server's keep-alive hint,
 * 72 s on Fastify), and the close waits for it.
 */
export async function closeApp(app: INestApplication): Promise<void> {
  const server = app.getHttpServer() as { closeIdleConnections?: () => void };
  const sweep = setInterval(() => server.closeIdleConnections?.(), 50);
  try {
    await app.close();
  } finally {
    clearInterval(sweep);
  }
}

function fastifyAdapter({ maxHeaderSize, trustProxy }: StartOptions): FastifyAdapter {
  if (maxHeaderSize === undefined && trustProxy === undefined) return new FastifyAdapter();
  return new FastifyAdapter({ trustProxy, http: maxHeaderSize === undefined ? undefined : { maxHeaderSize } });
}

function expressAdapter({ maxHeaderSize, trustProxy }: StartOptions): ExpressAdapter {
  const adapter = maxHeaderSize === undefined ? new ExpressAdapter() : new LargeHeaderExpressAdapter(maxHeaderSize);
  if (trustProxy !== undefined) adapter.set('trust proxy', trustProxy);
  return adapter;
}

/** Express on a Node server made with `maxHeaderSize`, which `ExpressAdapter` does not pass on. */
class LargeHeaderExpressAdapter extends ExpressAdapter {
  constructor(private readonly maxHeaderSize: number) {
    super();
  }

  /**
   * Swaps in a server of its own for the one the base method made. The base method's `httpsOptions`
   * and `forceCloseConnections` would miss the swap; `startApp` sets neither.
   */
  override initHttpServer(options: NestApplicationOptions): void {
    super.initHttpServer(options);
    this.setHttpServer(createServer({ maxHeaderSize: this.maxHeaderSize }, this.getInstance()));
  }
}

/** Whole body and the headers that matter, for assertions. */
export async function read(
  response: Response,
): Promise<{ status: number; body: any; headers: Record<string, string> }> {
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: response.status, body, headers: Object.fromEntries(response.headers.entries()) };
}
