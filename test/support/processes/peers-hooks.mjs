// @ts-check
/**
 * Module hooks for `peers-app.ts` (registered with `node --import ./peers-hooks.mjs`): every
 * import of an optional peer is logged to `PEERS_LOG` as `{ specifier, parent }`, and with
 * `PEERS_MISSING=1` fails as it would in a project that does not have the package.
 */
import { appendFileSync } from 'node:fs';
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

const PEERS = /^(graphql|@nestjs\/(graphql|apollo|mercurius|websockets|microservices)|@opentelemetry\/api)(\/|$)/;

/** @typedef {import('node:module').ResolveHook} ResolveHook */

/**
 * @param {Parameters<ResolveHook>[0]} specifier
 * @param {Parameters<ResolveHook>[1]} context
 * @param {Parameters<ResolveHook>[2]} next
 * @returns {Promise<import('node:module').ResolveFnOutput>}
 */
export async function resolve(specifier, context, next) {
  if (PEERS.test(specifier)) {
    // the spec that starts the app names the log
    appendFileSync(
      /** @type {string} */ (process.env.PEERS_LOG),
      `${JSON.stringify({ specifier, parent: context.parentURL })}\n`,
    );
    if (process.env.PEERS_MISSING === '1') {
      throw Object.assign(new Error(`Cannot find package '${specifier}'`), { code: 'ERR_MODULE_NOT_FOUND' });
    }
  }
  return next(specifier, context);
}

// imported by --import on the main thread: register this same file as the hooks
if (isMainThread) register(import.meta.url);
