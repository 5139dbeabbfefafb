import type { INestApplication, Type } from '@nestjs/common';
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

/** Builds `module` on the named adapter and listens on a free loopback port. */
export async function startApp(module: Type, adapter: AdapterName): Promise<TestApp> {
  const moduleRef = await Test.createTestingModule({ imports: [module] }).compile();
  const app =
    adapter === 'fastify'
      ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: false })
      : moduleRef.createNestApplication({ logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return {
    app,
    url,
    get: (path, headers = {}) => fetch(`${url}${path}`, { headers }),
    close: () => app.close(),
  };
}

/** Whole body and the headers that matter, for assertions. */
export async function read(response: Response): Promise<{ status: number; body: any; headers: Record<string, string> }> {
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: response.status, body, headers: Object.fromEntries(response.headers.entries()) };
}
