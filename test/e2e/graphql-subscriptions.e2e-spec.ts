import { randomUUID } from 'node:crypto';
import type { Client } from 'graphql-ws';
import { useTestRedis } from '../support/redis/test-redis.js';
import { type GraphqlApp, GRAPHQL_SUITES, startGraphqlApp, storeOptions } from '../support/graphql-apps.js';

const redis = useTestRedis();

/** A fresh API key: its own buckets. */
const apiKey = () => ({ 'x-api-key': `key-${randomUUID()}` });

/** The one result of a query or mutation sent over the WebSocket. */
async function resultOf(client: Client, query: string) {
  for await (const result of client.iterate({ query })) return result;
  throw new Error(`no result for ${query}`);
}

describe.each(GRAPHQL_SUITES)('GraphQL over graphql-ws on %s, %s store', (driver, store) => {
  let gql: GraphqlApp;
  const clients: Client[] = [];
  const connect = (headers: Record<string, string>) => {
    const client = gql.subscriptions(headers);
    clients.push(client);
    return client;
  };
  beforeAll(async () => {
    gql = await startGraphqlApp(driver, storeOptions(store, redis()));
  });
  afterAll(async () => {
    await Promise.all(
      clients.map(async (client) => {
        await client.dispose();
      }),
    );
    await gql.close();
  });
  afterEach(() =>
    expect({ errors: gql.logger.errors, warnings: gql.logger.warnings }).toEqual({ errors: [], warnings: [] }),
  );

  it('delivers more events than the burst, and charges none of them: queries still have the whole burst', async () => {
    const headers = apiKey();
    const listening = gql.ticker.listening();
    const events = connect(headers).iterate({ query: 'subscription { ticks }' });
    const first = events.next();
    await listening;
    for (let tick = 1; tick <= 5; tick++) gql.ticker.emit('tick', tick);
    const received = [(await first).value];
    for (let tick = 2; tick <= 5; tick++) received.push((await events.next()).value);
    expect(received).toEqual([1, 2, 3, 4, 5].map((tick) => ({ data: { ticks: tick } })));
    await events.return?.();

    // the same client, the same policy (burst 2): nothing was taken by the subscription or its events
    expect((await gql.post('{ books authors }', { headers })).body.errors).toBeUndefined();
    expect((await gql.post('{ books authors }', { headers })).body.errors).toBeUndefined();
    const refused = await gql.post('{ books authors }', { headers });
    expect(refused.body.errors?.map(({ extensions }) => extensions?.code)).toEqual(['RATE_LIMITED', 'RATE_LIMITED']);
  });

  it('limits queries sent over the socket by the upgrade request, each operation charged once', async () => {
    const client = connect(apiKey());
    expect(await resultOf(client, '{ books authors }')).toEqual({ data: { books: 'books', authors: 'authors' } });
    expect(await resultOf(client, '{ books authors }')).toEqual({ data: { books: 'books', authors: 'authors' } });
    const refused = await resultOf(client, '{ books authors }');
    expect(refused.data).toEqual({ books: null, authors: null });
    expect(
      refused.errors?.map(({ path, extensions }) => ({ path, code: extensions?.code, policy: extensions?.policy })),
    ).toEqual([
      { path: ['books'], code: 'RATE_LIMITED', policy: 'catalog' },
      { path: ['authors'], code: 'RATE_LIMITED', policy: 'catalog' },
    ]);

    // another key, another connection: a bucket of its own
    expect(await resultOf(connect(apiKey()), '{ books }')).toEqual({ data: { books: 'books' } });
  });
});
