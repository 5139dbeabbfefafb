import { randomUUID } from 'node:crypto';
import { expect } from '@jest/globals';
import { RedisStore } from '../../lib/index.js';
import { connectTestRedis, useTestRedis } from '../support/redis/test-redis.js';
import {
  DRIVERS,
  type GraphqlApp,
  type GraphqlError,
  type GraphqlResponse,
  GRAPHQL_SUITES,
  startGraphqlApp,
  storeOptions,
} from '../support/graphql-apps.js';

const redis = useTestRedis();

/** A fresh API key: its own buckets. */
const apiKey = () => ({ 'x-api-key': `key-${randomUUID()}` });

/** The rate-limit headers of an answer. */
const rateLimitHeaders = ({ headers }: GraphqlResponse) =>
  Object.fromEntries(Object.entries(headers).filter(([name]) => /^(ratelimit|x-ratelimit-|retry-after)/.test(name)));

/** A stack trace's frame, as `Error.stack` writes one: `at fn (file:line:col)`. */
const STACK_FRAME = /\bat .*:\d+:\d+/;

/** Every field of `fields` refused by `policy`, and nothing else: status 200, each field null with its error. */
function expectRefused(
  response: GraphqlResponse,
  fields: string[],
  policy: string,
  retryAfter: 'positive' | null,
): void {
  expect(response.status).toBe(200);
  expect(response.body.data).toEqual(Object.fromEntries(fields.map((field) => [field, null])));
  const errors = response.body.errors ?? [];
  expect(errors.map(({ path }) => path)).toEqual(expect.arrayContaining(fields.map((field) => [field])));
  expect(errors).toHaveLength(fields.length);
  for (const error of errors) expectRefusal(error, policy, retryAfter);
}

/** One field's refusal: RATE_LIMITED, the policy, retryAfter, a message naming the policy, no stack frame. */
function expectRefusal(error: GraphqlError, policy: string, retryAfter: 'positive' | null): void {
  expect(error.extensions).toMatchObject({ code: 'RATE_LIMITED', policy });
  if (retryAfter === null) expect(error.extensions?.retryAfter).toBeNull();
  else {
    expect(Number.isInteger(error.extensions?.retryAfter)).toBe(true);
    expect(error.extensions?.retryAfter).toBeGreaterThan(0);
  }
  expect(error.message).toContain(`"${policy}"`);
  expect(JSON.stringify(error)).not.toMatch(STACK_FRAME);
}

describe.each(GRAPHQL_SUITES)('GraphQL on %s, %s store', (driver, store) => {
  let gql: GraphqlApp;
  beforeAll(async () => {
    gql = await startGraphqlApp(driver, storeOptions(store, redis()));
  });
  afterAll(() => gql.close());
  // a refusal is an answer, not a fault: Nest logs no error for one
  // nor warns (of a context without a request, say)
  afterEach(() =>
    expect({ errors: gql.logger.errors, warnings: gql.logger.warnings }).toEqual({ errors: [], warnings: [] }),
  );

  it('charges a query of two limited root fields once: the third request is refused, not the second', async () => {
    const headers = apiKey();
    for (const request of [1, 2]) {
      const allowed = await gql.post('{ books authors }', { headers });
      expect({ request, ...allowed.body }).toEqual({ request, data: { books: 'books', authors: 'authors' } });
      expect(allowed.headers['x-ratelimit-remaining']).toBe(String(2 - request));
    }
    expectRefused(await gql.post('{ books authors }', { headers }), ['books', 'authors'], 'catalog', 'positive');
  });

  it("charges a field's own policy once per selection: each alias pays its own cost", async () => {
    const headers = apiKey();
    // search costs its `first`, against a burst of 20: 1 + 19, and nothing is left for c
    const spent = await gql.post('{ a: search(first: 1) b: search(first: 19) c: search(first: 1) }', { headers });
    expect(spent.body.data).toEqual({
      a: ['result 0'],
      b: Array.from({ length: 19 }, (_, index) => `result ${index}`),
      c: null,
    });
    expect(spent.body.errors?.map(({ path }) => path)).toEqual([['c']]);
    expectRefusal(spent.body.errors![0], 'search', 'positive');
    expect(spent.headers['x-ratelimit-remaining']).toBe('0');
    expectRefused(await gql.post('{ search(first: 1) }', { headers }), ['search'], 'search', 'positive');
  });

  it('charges a class-level policy once per operation, however many aliases and fields it covers', async () => {
    const headers = apiKey();
    const answer = await gql.post('{ a: books b: books c: authors d: authors }', { headers });
    expect(answer.body).toEqual({ data: { a: 'books', b: 'books', c: 'authors', d: 'authors' } });
    expect(answer.headers.ratelimit).toBe('"catalog";r=1;t=1000');
  });

  it("refuses a second alias of a field by its own policy, the operation charged once by the class's", async () => {
    const headers = apiKey();
    const answer = await gql.post('{ a: rare b: rare books }', { headers });
    expect(answer.body.data).toEqual({ a: 'rare', b: null, books: 'books' });
    expect(answer.body.errors?.map(({ path }) => path)).toEqual([['b']]);
    expectRefusal(answer.body.errors![0], 'rare', 'positive');
    expect(answer.headers.ratelimit?.split(', ').sort()).toEqual([
      '"catalog";r=1;t=1000',
      expect.stringMatching(/^"rare";r=0;t=\d+$/),
    ]);
    // a field its own policy refuses does not refuse the fields beside it: the operation was admitted
    const next = await gql.post('{ rare authors }', { headers });
    expect(next.body.data).toEqual({ rare: null, authors: 'authors' });
    expectRefusal(next.body.errors![0], 'rare', 'positive');
  });

  it('charges a field resolver once per selection, however many objects it resolves', async () => {
    const headers = apiKey();
    const reviewed = {
      shelf: ['Emma', 'Persuasion', 'Sanditon'].map((title) => ({ title, reviews: `reviews of ${title}` })),
    };
    expect((await gql.post('{ shelf { title reviews } }', { headers })).body).toEqual({ data: reviewed });
    expect((await gql.post('{ shelf { title reviews } }', { headers })).body).toEqual({ data: reviewed });

    const refused = await gql.post('{ shelf { title reviews } }', { headers });
    expect(refused.body.data).toEqual({
      shelf: ['Emma', 'Persuasion', 'Sanditon'].map((title) => ({ title, reviews: null })),
    });
    // (Mercurius writes a list index in a path as a string)
    expect(refused.body.errors?.map(({ path }) => path?.map(String))).toEqual(
      ['0', '1', '2'].map((index) => ['shelf', index, 'reviews']),
    );
    for (const error of refused.body.errors ?? []) expectRefusal(error, 'reviews', 'positive');
  });

  it('charges a field resolver under two aliases of its list twice: both selections take the burst of 2', async () => {
    const headers = apiKey();
    const twice = await gql.post('{ a: shelf { reviews } b: shelf { reviews } }', { headers });
    expect(twice.body.errors).toBeUndefined();
    expect(twice.headers.ratelimit).toMatch(/^"reviews";r=0;t=\d+$/);
    const refused = await gql.post('{ shelf { reviews } }', { headers });
    expect(refused.body.errors).toHaveLength(3);
    for (const error of refused.body.errors ?? []) expectRefusal(error, 'reviews', 'positive');
  });

  it('refuses with RATE_LIMITED, the policy and retryAfter, and the headers on the HTTP answer', async () => {
    const headers = apiKey();
    const first = await gql.post('{ books }', { headers });
    expect(rateLimitHeaders(first)).toEqual({
      'ratelimit-policy': '"catalog";q=2;w=2000',
      ratelimit: '"catalog";r=1;t=1000',
      'x-ratelimit-limit': '2',
      'x-ratelimit-remaining': '1',
      'x-ratelimit-reset': expect.stringMatching(/^\d+$/),
    });
    await gql.post('{ books }', { headers });

    const refused = await gql.post('{ books }', { headers });
    expectRefused(refused, ['books'], 'catalog', 'positive');
    const [error] = refused.body.errors ?? ([] as GraphqlError[]);
    expect(error.message).toBe(
      `Rate limit exceeded for policy "catalog". Try again in ${String(error.extensions?.retryAfter)} seconds.`,
    );
    expect(rateLimitHeaders(refused)).toEqual({
      'ratelimit-policy': '"catalog";q=2;w=2000',
      ratelimit: expect.stringMatching(/^"catalog";r=0;t=\d+$/),
      'x-ratelimit-limit': '2',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': expect.stringMatching(/^\d+$/),
      'retry-after': String(error.extensions?.retryAfter),
    });
  });

  it('refuses with retryAfter null and no Retry-After when the cost exceeds the burst', async () => {
    const refused = await gql.post('{ search(first: 50) }', { headers: apiKey() });
    expectRefused(refused, ['search'], 'search', null);
    expect(refused.body.errors?.[0].message).toMatch(/50.*20|20.*50/);
    expect(refused.headers['retry-after']).toBeUndefined();
    expect(refused.headers['x-ratelimit-remaining']).toBe('20');
  });

  it('answers the fields it admits beside the ones it refuses', async () => {
    const headers = apiKey();
    await gql.post('{ books }', { headers });
    await gql.post('{ books }', { headers });
    const mixed = await gql.post('{ books search(first: 3) }', { headers });
    expect(mixed.body.data).toEqual({ books: null, search: ['result 0', 'result 1', 'result 2'] });
    expect(mixed.body.errors?.map(({ path }) => path)).toEqual([['books']]);
    expectRefusal(mixed.body.errors![0], 'catalog', 'positive');
  });

  it('gives each API key its own bucket, and limits a request without one by its IP', async () => {
    const [one, other] = [apiKey(), apiKey()];
    await gql.post('{ books }', { headers: one });
    await gql.post('{ books }', { headers: one });
    expectRefused(await gql.post('{ books }', { headers: one }), ['books'], 'catalog', 'positive');
    expect((await gql.post('{ books }', { headers: other })).body).toEqual({ data: { books: 'books' } });

    // no key: the IP's bucket, which no key shares
    expect((await gql.post('{ authors }')).body).toEqual({ data: { authors: 'authors' } });
    expect((await gql.post('{ authors }')).body).toEqual({ data: { authors: 'authors' } });
    expectRefused(await gql.post('{ authors }'), ['authors'], 'catalog', 'positive');
    expect((await gql.post('{ authors }', { headers: apiKey() })).body).toEqual({ data: { authors: 'authors' } });
  });

  describe('one HTTP response, several decisions', () => {
    /** Spends the whole of `catalog` (burst 2) and of `search` (burst 20) for `headers`' key. */
    async function spend(headers: Record<string, string>): Promise<void> {
      expect((await gql.post('{ books }', { headers })).body.errors).toBeUndefined();
      expect((await gql.post('{ books search(first: 20) }', { headers })).body.errors).toBeUndefined();
    }
    /** The members of a list header, in the order they were decided in (a Redis store may answer fields in either). */
    const members = (value: string | undefined) => (value ?? '').split(', ').sort();

    it.each(['{ books search(first: 5) }', '{ search(first: 5) books }'])(
      '%s: Retry-After from the refusal that frees up last, every policy listed, whatever the order of the fields',
      async (query) => {
        const headers = apiKey();
        await spend(headers);
        const refused = await gql.post(query, { headers });
        // catalog frees 1 token in about 1,000 s, search 5 in about 5,000 s
        const retryAfters = Object.fromEntries(
          (refused.body.errors ?? []).map(
            ({ path, extensions }) => [String(path?.[0]), extensions?.retryAfter as number] as const,
          ),
        );
        expect(Object.keys(retryAfters).sort()).toEqual(['books', 'search']);
        expect(retryAfters.search).toBeGreaterThan(retryAfters.books);
        expect(refused.headers['retry-after']).toBe(String(retryAfters.search));
        expect(members(refused.headers['ratelimit-policy'])).toEqual(['"catalog";q=2;w=2000', '"search";q=20;w=20000']);
        expect(members(refused.headers.ratelimit)).toEqual([
          expect.stringMatching(/^"catalog";r=0;t=\d+$/),
          expect.stringMatching(/^"search";r=0;t=\d+$/),
        ]);
        // the single-policy headers describe the same policy as Retry-After
        expect(refused.headers['x-ratelimit-limit']).toBe('20');
        expect(refused.headers['x-ratelimit-remaining']).toBe('0');
      },
    );

    it.each(['{ search(first: 5) bulk }', '{ bulk search(first: 5) }'])(
      '%s: no Retry-After once a field can never be admitted, though another was refused for a while',
      async (query) => {
        const headers = apiKey();
        await spend(headers);
        const refused = await gql.post(query, { headers });
        const retryAfters = Object.fromEntries(
          (refused.body.errors ?? []).map(
            ({ path, extensions }) => [String(path?.[0]), extensions?.retryAfter] as const,
          ),
        );
        expect(retryAfters).toEqual({ search: expect.any(Number), bulk: null });
        expect(refused.headers['retry-after']).toBeUndefined();
        expect(refused.headers['x-ratelimit-limit']).toBe('2');
        expect(members(refused.headers['ratelimit-policy'])).toEqual(['"bulk";q=2;w=2000', '"search";q=20;w=20000']);
      },
    );

    it('lists the policy of a field admitted beside one refused, with what it has left', async () => {
      const headers = apiKey();
      await spend(headers);
      const mixed = await gql.post('{ books tenant }', { headers });
      expect(mixed.body.data).toEqual({ books: null, tenant: 'tenant' });
      expect(mixed.headers['retry-after']).toBe(String(mixed.body.errors?.[0].extensions?.retryAfter));
      expect(members(mixed.headers.ratelimit)).toEqual([
        expect.stringMatching(/^"catalog";r=0;t=\d+$/),
        '"tenant";r=999;t=1000',
      ]);
    });

    it('charges each operation of a batched request: a class-level policy once per operation', async () => {
      const headers = apiKey();
      const answer = await gql.batch(['{ a: books b: authors }', '{ a: books }', '{ a: authors }'], { headers });
      expect(answer.status).toBe(200);
      // two of the three operations pass (whichever the driver ran first), each charged once
      const refused = answer.body.filter(({ errors }) => errors !== undefined);
      expect(refused).toHaveLength(1);
      expect(Object.values(refused[0].data ?? {}).every((value) => value === null)).toBe(true);
      for (const error of refused[0].errors ?? []) expectRefusal(error, 'catalog', 'positive');
      expect(answer.headers['retry-after']).toBe(String(refused[0].errors![0].extensions?.retryAfter));
      expect(answer.headers.ratelimit).toMatch(/^"catalog";r=0;t=\d+$/);
    });

    it("charges a field's own policy per selection in each operation of a batch: 10 operations of a burst of 20", async () => {
      const headers = apiKey();
      const answer = await gql.batch(
        Array.from({ length: 10 }, () => '{ a: search(first: 2) b: search(first: 2) }'),
        { headers },
      );
      const admitted = answer.body.flatMap(({ data }) => Object.values(data ?? {})).filter((value) => value !== null);
      expect(admitted).toHaveLength(10);
      expect(answer.body.flatMap(({ errors }) => errors ?? [])).toHaveLength(10);
      expect(answer.headers['x-ratelimit-remaining']).toBe('0');
      const waits = answer.body
        .flatMap(({ errors }) => errors ?? [])
        .map(({ extensions }) => extensions?.retryAfter as number);
      expect(answer.headers['retry-after']).toBe(String(Math.max(...waits)));
    });
  });

  it('limits by IP where the policy says so, whatever the API key', async () => {
    expect((await gql.post('{ byIp }', { headers: apiKey() })).body).toEqual({ data: { byIp: 'by-ip' } });
    expect((await gql.post('{ byIp }', { headers: apiKey() })).body).toEqual({ data: { byIp: 'by-ip' } });
    expectRefused(await gql.post('{ byIp }', { headers: apiKey() }), ['byIp'], 'by-ip', 'positive');
  });

  describe('hostile variables', () => {
    /** Sends `variables` (JSON) with a fresh API key: never a 500. */
    async function send(query: string, variables: string): Promise<GraphqlResponse> {
      const answer = await gql.post(query, { variables, headers: apiKey() });
      expect(answer.status).toBeLessThan(500);
      return answer;
    }
    const TENANT =
      'query ($tenant: Json, $weight: Json, $ratio: Float) { tenant(tenant: $tenant, weight: $weight, ratio: $ratio) }';
    /** An object 5,000 levels deep, as JSON: deeper than `JSON.stringify` can write here. */
    const NESTED = `${'{"a":'.repeat(5_000)}{}${'}'.repeat(5_000)}`;

    it.each([
      ['a huge key', JSON.stringify({ tenant: 'x'.repeat(64 * 1024) })],
      ['a key of the wrong type', JSON.stringify({ tenant: 42, weight: 'abc' })],
      ['a list for a key, an object for a cost', JSON.stringify({ tenant: ['a', 'b'], weight: { cost: 1 } })],
      ['a deeply nested key and cost', `{ "tenant": ${NESTED}, "weight": ${NESTED} }`],
      ['a negative cost', JSON.stringify({ weight: -5 })],
      ['an infinite cost', '{ "weight": 1e400 }'],
    ])('%s: the key and cost functions fall back, the field answers', async (_, variables) => {
      const answer = await send(TENANT, variables);
      expect(answer.body).toEqual({ data: { tenant: 'tenant' } });
      expect(answer.headers['x-ratelimit-limit']).toBe('1000');
      expect(answer.headers['x-ratelimit-remaining']).toBe('999');
    });

    it('a cost far over the burst: refused, retryAfter null', async () => {
      const answer = await send(TENANT, JSON.stringify({ tenant: `t-${randomUUID()}`, weight: 1e300 }));
      expectRefused(answer, ['tenant'], 'tenant', null);
    });

    it.each([
      [
        'a huge string for an Int',
        'query ($first: Int) { search(first: $first) }',
        JSON.stringify({ first: 'x'.repeat(64 * 1024) }),
      ],
      ['a number past Int', 'query ($first: Int) { search(first: $first) }', JSON.stringify({ first: 2 ** 40 })],
      ['a deeply nested object for a Float', TENANT, `{ "ratio": ${NESTED} }`],
    ])('%s: GraphQL rejects it with a 400 before any resolver runs', async (_, query, variables) => {
      const answer = await send(query, variables);
      expect(answer.status).toBe(400);
      expect(answer.body.data ?? undefined).toBeUndefined();
      expect(answer.body.errors?.length).toBeGreaterThan(0);
      expect(answer.headers['x-ratelimit-limit']).toBeUndefined();
    });
  });
});

describe.each(GRAPHQL_SUITES)('GraphQL on %s, %s store, under a module-wide policy', (driver, store) => {
  it('charges it once per operation, whatever its fields, and once for each operation of a batch', async () => {
    const gql = await startGraphqlApp(driver, {
      ...storeOptions(store, redis()),
      policies: [{ name: 'everything', rps: 0.001, burst: 5 }],
    });
    /** `everything`'s member of an answer's RateLimit header. */
    const everything = ({ headers }: { headers: Record<string, string> }) =>
      headers.ratelimit?.split(', ').find((member) => member.startsWith('"everything"'));
    try {
      const headers = apiKey();
      const one = await gql.post('{ a: search(first: 1) b: search(first: 1) shelf { reviews } }', { headers });
      expect(one.body.errors).toBeUndefined();
      expect(everything(one)).toBe('"everything";r=4;t=1000');

      // the operations of a batch run side by side: which one comes last is the driver's business
      const batch = await gql.batch(
        Array.from({ length: 5 }, () => '{ search(first: 1) }'),
        { headers },
      );
      expect(batch.body.filter(({ data }) => data?.search !== null)).toEqual(
        Array.from({ length: 4 }, () => ({ data: { search: ['result 0'] } })),
      );
      const [refused] = batch.body.filter(({ data }) => data?.search === null);
      expectRefusal(refused.errors![0], 'everything', 'positive');
      expect(everything(batch)).toMatch(/^"everything";r=0;t=\d+$/);
    } finally {
      await gql.close();
    }
  });
});

describe.each(GRAPHQL_SUITES)(
  "GraphQL on %s, %s store, under a module-wide policy with scope: 'route'",
  (driver, store) => {
    it('charges each resolver (route) its own bucket once per operation, however many aliases select it', async () => {
      const gql = await startGraphqlApp(driver, {
        ...storeOptions(store, redis()),
        policies: [{ name: 'per-route', rps: 0.001, burst: 3, scope: 'route' }],
      });
      try {
        const headers = apiKey();
        // search's bucket once (two aliases), books' once
        const one = await gql.post('{ a: search(first: 1) b: search(first: 1) books }', { headers });
        expect(one.body.errors).toBeUndefined();
        for (const request of [1, 2]) {
          const admitted = await gql.post('{ search(first: 1) }', { headers });
          expect({ request, errors: admitted.body.errors }).toEqual({ request, errors: undefined });
        }
        // search's bucket of 3 is spent; books' has 2 left
        expectRefused(await gql.post('{ search(first: 1) }', { headers }), ['search'], 'per-route', 'positive');
        const books = await gql.post('{ books }', { headers });
        expect(books.body).toEqual({ data: { books: 'books' } });
      } finally {
        await gql.close();
      }
    });
  },
);

describe.each(DRIVERS)('GraphQL on %s when the store cannot decide', (driver) => {
  it("failMode 'closed': each field gets RATE_LIMIT_UNAVAILABLE, the answer Retry-After: 1", async () => {
    // a client that has quit: every command fails at once ("Connection is closed")
    const closed = await connectTestRedis();
    await closed.quit();
    const gql = await startGraphqlApp(driver, { store: new RedisStore({ client: closed }), failMode: 'closed' });
    try {
      const answer = await gql.post('{ books authors }', { headers: apiKey() });
      expect(answer.status).toBe(200);
      expect(answer.body.data).toEqual({ books: null, authors: null });
      expect(
        answer.body.errors?.map(({ path, extensions }) => ({
          path,
          code: extensions?.code,
          retryAfter: extensions?.retryAfter,
        })),
      ).toEqual([
        { path: ['books'], code: 'RATE_LIMIT_UNAVAILABLE', retryAfter: 1 },
        { path: ['authors'], code: 'RATE_LIMIT_UNAVAILABLE', retryAfter: 1 },
      ]);
      expect(JSON.stringify(answer.body)).not.toMatch(STACK_FRAME);
      expect(answer.headers['retry-after']).toBe('1');
      expect(gql.logger.errors).toEqual([]);
    } finally {
      await gql.close();
    }
  });
});
