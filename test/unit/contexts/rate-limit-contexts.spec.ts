import { EventEmitter } from 'node:events';
import type { ExecutionContext } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import { GraphqlRateLimitContext } from '../../../lib/contexts/graphql.context.js';
import { HttpRateLimitContext } from '../../../lib/contexts/http.context.js';
import type { RateLimitContext } from '../../../lib/contexts/rate-limit-context.js';
import { RateLimitContexts } from '../../../lib/contexts/rate-limit-contexts.js';
import { RpcRateLimitContext } from '../../../lib/contexts/rpc.context.js';
import { WsRateLimitContext } from '../../../lib/contexts/ws.context.js';
import type { ContextType } from '../../../lib/rate-limit-options.interface.js';

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

describe('WsRateLimitContext.departure: one listener per connection, however many of its messages wait', () => {
  /** A ws client (its `close` event, its `readyState`) and a message of it, as the guard's context. */
  function connection() {
    const client = Object.assign(new EventEmitter(), { readyState: 1 });
    const message = { getArgByIndex: () => client } as unknown as ExecutionContext;
    return { client, message };
  }

  it('adds one listener for all, takes a message that stops waiting off it, and the listener with the last one', async () => {
    const seam = await WsRateLimitContext.load();
    const { client, message } = connection();
    const departures = Array.from({ length: 12 }, () => seam.departure(message));
    expect(client.listenerCount('close')).toBe(1);
    for (const departure of departures.slice(0, 11)) departure.end();
    expect(client.listenerCount('close')).toBe(1);
    departures[11].end();
    expect(client.listenerCount('close')).toBe(0);
    expect(departures.some((departure) => departure.signal.aborted)).toBe(false);
    // the next message to wait watches the connection again
    seam.departure(message);
    expect(client.listenerCount('close')).toBe(1);
  });

  it('aborts every waiting message when the client goes, those that stopped waiting excepted, and leaves no listener', async () => {
    const seam = await WsRateLimitContext.load();
    const { client, message } = connection();
    const [done, ...waiting] = Array.from({ length: 4 }, () => seam.departure(message));
    done.end();
    client.readyState = 3;
    client.emit('close');
    expect(done.signal.aborted).toBe(false);
    expect(waiting.map((departure) => departure.signal.aborted)).toEqual([true, true, true]);
    expect(client.listenerCount('close')).toBe(0);
    for (const departure of waiting) departure.end();
    // a message of a client gone already is aborted at once, with no listener
    const late = seam.departure(message);
    expect(late.signal.aborted).toBe(true);
    expect(client.listenerCount('close')).toBe(0);
  });

  it("keeps each connection's waits apart", async () => {
    const seam = await WsRateLimitContext.load();
    const [one, two] = [connection(), connection()];
    const [fromOne, fromTwo] = [seam.departure(one.message), seam.departure(two.message)];
    one.client.emit('close');
    expect([fromOne.signal.aborted, fromTwo.signal.aborted]).toEqual([true, false]);
    expect(two.client.listenerCount('close')).toBe(1);
  });
});
