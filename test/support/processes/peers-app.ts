/**
 * An HTTP app (Express, memory store) for `optional-peers.e2e-spec.ts`, run as its own Node
 * process with the resolve hook of `peers-hooks.mjs`, which logs every import of an optional
 * peer to `PEERS_LOG` (and, with `PEERS_MISSING=1`, makes it fail as in a project without them).
 *
 * It sends two requests to a route limited to one and prints `{"statuses":[...]}`. With
 * `WITH_RPC=1` it then logs a marker line, starts a TCP microservice in the same app
 * (`inheritAppConfig`), sends it one message under the same kind of policy, and prints
 * `{"rpc":...}`: the first context of another kind the module sees.
 */
import 'reflect-metadata';
import { appendFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { Controller, Get, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { RateLimit, RateLimitModule } from '../../../lib/index.js';

@Controller('limited')
class LimitedController {
  @RateLimit({ rps: 0.001, burst: 1 })
  @Get()
  take() {
    return { ok: true };
  }
}

async function main(): Promise<void> {
  const rpc = process.env.WITH_RPC === '1' ? await import('@nestjs/microservices') : undefined;
  const controllers: (new () => unknown)[] = [LimitedController];
  if (rpc !== undefined) {
    const { MessagePattern } = rpc;
    @Controller()
    class LimitedMessages {
      @RateLimit({ rps: 0.001, burst: 1 })
      @MessagePattern('take')
      take() {
        return 'taken';
      }
    }
    controllers.push(LimitedMessages);
  }

  @Module({ imports: [RateLimitModule.forRoot()], controllers })
  class AppModule {}

  const app = await NestFactory.create(AppModule, new ExpressAdapter(), { logger: false });
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  const statuses: number[] = [];
  for (let i = 0; i < 2; i++) statuses.push((await fetch(`${url}/limited`)).status);
  console.log(JSON.stringify({ statuses }));

  if (rpc !== undefined) {
    appendFileSync(process.env.PEERS_LOG!, 'first rpc message\n');
    const port = await freePort();
    app.connectMicroservice(
      { transport: rpc.Transport.TCP, options: { host: '127.0.0.1', port } },
      { inheritAppConfig: true },
    );
    await app.startAllMicroservices();
    const client = rpc.ClientProxyFactory.create({
      transport: rpc.Transport.TCP,
      options: { host: '127.0.0.1', port },
    });
    const answers: unknown[] = [];
    for (let i = 0; i < 2; i++) {
      answers.push(
        await client
          .send('take', {})
          .toPromise()
          .catch((error: unknown) => ({ error })),
      );
    }
    client.close();
    console.log(JSON.stringify({ rpc: answers }));
  }
  await app.close();
}

/** A loopback port no one listens on just now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

await main();
