import type { HttpAdapterHost } from '@nestjs/core';
import { GraphqlRateLimitContext } from '../../lib/contexts/graphql.context.js';
import { HttpRateLimitContext } from '../../lib/contexts/http.context.js';
import type { RateLimitContext } from '../../lib/contexts/rate-limit-context.js';
import { RateLimitContexts } from '../../lib/contexts/rate-limit-contexts.js';
import { RpcRateLimitContext } from '../../lib/contexts/rpc.context.js';
import { WsRateLimitContext } from '../../lib/contexts/ws.context.js';
import type { ContextType } from '../../lib/rate-limit-options.interface.js';

/** Which seam the guard uses for each kind of context, and when it is made. */

const adapterHost = {} as HttpAdapterHost;
const ALL: ContextType[] = ['http', 'graphql', 'ws', 'rpc'];

describe('RateLimitContexts', () => {
  it('makes the seam of each limited kind on first use, once', async () => {
    const contexts = new RateLimitContexts({ contexts: ALL }, adapterHost);
    expect(contexts.for('ws')).toBeUndefined();
    const [first, second] = await Promise.all([contexts.load('ws'), contexts.load('ws')]);
    expect(first).toBeInstanceOf(WsRateLimitContext);
    expect(second).toBe(first);
    expect(contexts.for('ws')).toBe(first);
    expect(await contexts.load('http')).toBeInstanceOf(HttpRateLimitContext);
    expect(await contexts.load('graphql')).toBeInstanceOf(GraphqlRateLimitContext);
    expect(await contexts.load('rpc')).toBeInstanceOf(RpcRateLimitContext);
  });

  it('has no seam for a kind left out of `contexts`, nor for a kind Nest does not have', async () => {
    const contexts = new RateLimitContexts({ contexts: ['http'] }, adapterHost);
    expect(await contexts.load('graphql')).toBeUndefined();
    expect(await contexts.load('rpc')).toBeUndefined();
    expect(await contexts.load('kafka')).toBeUndefined();
    expect(contexts.for('graphql')).toBeUndefined();
  });

  it("uses an app's own seam in place of the module's, whatever `contexts` says", async () => {
    const own = { request: () => undefined } as unknown as RateLimitContext;
    const contexts = new RateLimitContexts({ contexts: ['http'] }, adapterHost);
    contexts.use('rpc', own);
    contexts.use('http', own);
    expect(contexts.for('rpc')).toBe(own);
    expect(await contexts.load('rpc')).toBe(own);
    expect(await contexts.load('http')).toBe(own);
  });

  it('keeps a seam set with use() while the module was making its own', async () => {
    const own = { request: () => undefined } as unknown as RateLimitContext;
    const contexts = new RateLimitContexts({ contexts: ALL }, adapterHost);
    const loading = contexts.load('ws');
    contexts.use('ws', own);
    expect(await loading).toBe(own);
    expect(contexts.for('ws')).toBe(own);
  });
});
