import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import { GraphQLModule } from '@nestjs/graphql';
import { RateLimitModule, type RateLimitModuleOptions } from 'nestjs-ratelimit';
import { AccountController } from './account.controller.js';
import { ApiController } from './api.controller.js';
import { CatalogController } from './catalog.controller.js';
import { CatalogResolver } from './catalog.resolver.js';
import { ChatController } from './chat.controller.js';
import { EchoGateway } from './echo.gateway.js';
import { FakeModel } from './fake-model.js';
import { HealthController } from './health.controller.js';

const logger = new Logger('RateLimit');

/**
 * The sample's rate limits. REDIS_URL is read when the module initialises, not when this file
 * is imported, so whoever starts the app (a shell, a process manager, a test) can set it late.
 */
export function rateLimitOptions(): RateLimitModuleOptions {
  const redis = process.env.REDIS_URL || undefined;
  // Log the host only: a redis:// URL may carry a password.
  logger.log(
    redis ? `Store: Redis at ${new URL(redis).host}` : 'Store: memory (set REDIS_URL to share limits across instances)',
  );
  return {
    // Unset: each process counts on its own. Set: every instance shares Redis's buckets.
    redis,
    // A generous backstop for every route, GraphQL request and gateway message not skipped, one
    // bucket per client across all of them, so no single client can take the whole app whatever
    // the per-route limits say.
    policies: [{ name: 'global', rps: 100, burst: 200 }],
    // 'dimensions' adds x-ratelimit-limit-, -remaining- and -reset-requests and -tokens (one set per
    // policy unit), the headers OpenAI's SDKs and LLM clients read, beside the IETF ones
    headers: ['ietf', 'x-ratelimit', 'dimensions'],
  };
}

@Module({
  imports: [
    RateLimitModule.forRootAsync({ useFactory: rateLimitOptions }),
    // the schema is built from the resolvers' decorators, in memory (nothing written to disk)
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  controllers: [HealthController, CatalogController, ApiController, AccountController, ChatController],
  // the chat endpoint's model, streaming 50 tokens a second, about as fast as a hosted one
  providers: [CatalogResolver, EchoGateway, { provide: FakeModel, useValue: new FakeModel(50) }],
})
export class AppModule {}
