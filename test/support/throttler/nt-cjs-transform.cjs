// @ts-check
/**
 * Jest transform for the real @nestjs/throttler (NT, CommonJS) under the suites' native ES
 * modules. NT `require`s @nestjs/common and @nestjs/core, which NestJS 12 ships as ES modules
 * only: Node 20.19+ loads them (require(esm)), Jest's own module loader does so only from Node
 * 24.9 on. So those two requires are bound to the very module instances the app imported (which
 * `test/support/throttler/implementations.ts` registers on `globalThis` before it imports NT),
 * as Node's require(esm) would bind them. NT's own code is left as it is.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports -- Jest loads this transform as CommonJS
const { createHash } = require('node:crypto');

/** Bump when the rewrite changes: part of Jest's cache key. */
const VERSION = '1';

module.exports = {
  /**
   * @param {string} source
   * @returns {{ code: string }}
   */
  process(source) {
    const code = source.replace(
      /require\("(@nestjs\/(?:common|core))"\)/g,
      (_, id) => `globalThis.__nestjsForThrottler(${JSON.stringify(id)})`,
    );
    return { code };
  },
  /**
   * @param {string} source
   * @param {string} path
   */
  getCacheKey(source, path) {
    return createHash('sha256').update(`${VERSION}\0${path}\0${source}`).digest('hex');
  },
};
