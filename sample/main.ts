import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { AppModule } from './app.module.js';

async function bootstrap(): Promise<void> {
  const app = await NestFactory.create<NestExpressApplication>(AppModule);

  // Behind a load balancer or reverse proxy, req.ip is the proxy's address, so every client
  // would share the 'ip' buckets. Then tell Express how many proxy hops to trust, e.g.
  //   app.set('trust proxy', 1);
  // Not enabled here: without a proxy in front, it would let clients choose their own IP
  // (and so their own bucket) through X-Forwarded-For.

  // Runs the module's onApplicationShutdown on SIGTERM/SIGINT, which closes the Redis client.
  app.enableShutdownHooks();

  const port = Number(process.env.PORT ?? 3000);
  await app.listen(port);
  Logger.log(`Listening on http://localhost:${port}`, 'Sample');
}

await bootstrap();
