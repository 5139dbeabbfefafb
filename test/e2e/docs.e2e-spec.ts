/**
 * The docs kept honest: every TypeScript block of README.md and docs/*.md compiles, as an app's
 * files, against the package as built and packed (its declarations, through its `exports` map);
 * every relative link leads to a file, a folder or a heading; every section of the README before
 * its split into docs/ (commit f3324c3) is a heading of the page that holds it now; and the
 * packed package ships the docs and none of the tests. The checker (test/support/docs-check.ts)
 * is tried on pages made up to fail, so that a pass means the docs are right, not that it saw
 * nothing. A block's info string says how it is checked: `ts`, `ts fragment` (not compiled),
 * `ts decorators` (a handler's decorators, on a method of a class), `ts file=src/orders.controller.ts`
 * (a file the page's other blocks import).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { brokenLinks, checkBlocks, headings, linesOf } from '../support/docs-check.js';
import { packedPackage, unpackedProject } from '../support/processes/packed-app.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const run = promisify(execFile);

/**
 * Every heading of README.md at f3324c3 (outside its fenced blocks, in order), before it was split,
 * and the file that holds that section now, where it is a heading at any level.
 */
const HOMES: [heading: string, file: string][] = [
  ['nestjs-ratelimit', 'README.md'],
  ['The two commands', 'CONTRIBUTING.md'],
  ['Quick start', 'docs/01-getting-started.md'],
  ['NestJS 11 and CommonJS', 'docs/01-getting-started.md'],
  ['Module options', 'docs/01-getting-started.md'],
  ['Policies', 'docs/02-policies-and-algorithms.md'],
  ['Per-client limits', 'docs/04-per-client-limits.md'],
  ['Tiers', 'docs/04-per-client-limits.md'],
  ['Login protection: count failures, block abusers', 'docs/04-per-client-limits.md'],
  ['skipIf', 'docs/04-per-client-limits.md'],
  ['Jitter', 'docs/04-per-client-limits.md'],
  ['Adaptive rates', 'docs/04-per-client-limits.md'],
  ['Concurrency limits', 'docs/05-concurrency-and-quotas.md'],
  ['Quotas per calendar period', 'docs/05-concurrency-and-quotas.md'],
  ['Choosing an algorithm', 'docs/02-policies-and-algorithms.md'],
  ['Leaving the queue', 'docs/02-policies-and-algorithms.md'],
  ['Simulator', 'docs/14-simulator.md'],
  ['Policies', 'docs/14-simulator.md'],
  ['Traffic', 'docs/14-simulator.md'],
  ['Output', 'docs/14-simulator.md'],
  ['Responses and headers', 'docs/06-responses-and-headers.md'],
  ['Problem details (RFC 9457)', 'docs/06-responses-and-headers.md'],
  ['Your own refusal', 'docs/06-responses-and-headers.md'],
  ['How keys are derived', 'docs/03-keys-and-identities.md'],
  ['Auth guard order', 'docs/03-keys-and-identities.md'],
  ['Every NestJS context', 'docs/07-nestjs-contexts.md'],
  ['GraphQL', 'docs/07-nestjs-contexts.md'],
  ['WebSocket gateways', 'docs/07-nestjs-contexts.md'],
  ['Microservices', 'docs/07-nestjs-contexts.md'],
  ['Your own seam', 'docs/07-nestjs-contexts.md'],
  ['Stores', 'docs/08-redis-in-production.md'],
  ['Running with Redis in production', 'docs/08-redis-in-production.md'],
  ['Migrating from @nestjs/throttler', 'docs/13-migrating-from-throttler.md'],
  ['Testing your app: `nestjs-ratelimit/testing`', 'docs/09-testing-your-app.md'],
  ['`RateLimiterService.resetAll()`', 'docs/09-testing-your-app.md'],
  ['Metrics and events', 'docs/10-metrics-and-events.md'],
  ['OpenTelemetry metrics', 'docs/10-metrics-and-events.md'],
  ['diagnostics_channel events', 'docs/10-metrics-and-events.md'],
  ['Programmatic use', 'docs/11-programmatic-use.md'],
  ['Extending', 'docs/12-extending.md'],
  ['Writing a store', 'docs/12-extending.md'],
  ['Performance', 'BENCHMARKS.md'],
  ['Layout', 'CONTRIBUTING.md'],
  ['Adding what a request owes at its end', 'CONTRIBUTING.md'],
  ['Adding an algorithm', 'CONTRIBUTING.md'],
];

/**
 * The sha256 of HOMES's headings joined by `\n`, as taken from `git show f3324c3:README.md` when
 * the table was written: the table still names every heading of that README, in its order.
 */
const OLD_HEADINGS_SHA256 = '7a45c66170b05c924ca8080f06ade30461566947caa13b98d6e49c465a14bd79';

/** The markdown files under `dir` (from the root), at any depth, as absolute paths. */
function markdownUnder(dir: string): string[] {
  if (!existsSync(join(ROOT, dir))) return [];
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.md'))
    .sort()
    .map((file) => join(ROOT, dir, file));
}

/** The pages whose TypeScript blocks are compiled: README.md and the docs. */
function pages(): string[] {
  return [join(ROOT, 'README.md'), ...markdownUnder('docs')];
}

/** The markdown files whose links are followed: the pages and the repository's other documents. */
function linkingFiles(): string[] {
  return [
    ...[
      'README.md',
      'CONTRIBUTING.md',
      'BENCHMARKS.md',
      'CHANGELOG.md',
      'lib/throttler/README.md',
      'bench/instruction-meter.md',
    ].map((file) => join(ROOT, file)),
    ...markdownUnder('docs'),
  ];
}

/** What says that `heading` is not a heading of `file` (from the root), if it is not. */
function homeless([heading, file]: [string, string]): string[] {
  const path = join(ROOT, file);
  if (!existsSync(path)) return [`${file}: no such file, for "${heading}"`];
  const found = headings(readFileSync(path, 'utf8')).some(({ text }) => text === heading);
  return found ? [] : [`${file}: no heading "${heading}"`];
}

let project: string;

beforeAll(async () => {
  const started = performance.now();
  ({ project } = await unpackedProject('rl-docs-'));
  await writeFile(
    join(project, 'package.json'),
    JSON.stringify({ name: 'docs-blocks', private: true, type: 'module' }),
  );
  console.log(`built, packed and unpacked in ${Math.round(performance.now() - started)} ms`);
}, 180_000);

afterAll(async () => {
  if (project) await rm(project, { recursive: true, force: true });
});

describe('the docs', () => {
  it('compile: every TypeScript block of README.md and docs/*.md, against the built package', async () => {
    const { diagnostics, pages: counted, ms } = await checkBlocks(pages(), ROOT, join(project, 'docs-blocks'));
    const lines = counted.map(
      ({ page, compiled, fragments }) => `${page}: ${compiled} compiled, ${fragments} fragments skipped`,
    );
    const total = counted.reduce((sum, { compiled }) => sum + compiled, 0);
    console.log(`${lines.join('\n')}\n${total} blocks of ${counted.length} pages compiled in ${ms} ms`);
    expect(diagnostics).toEqual([]);
  }, 120_000);

  it('link only to files, folders and headings that are there', () => {
    expect(brokenLinks(linkingFiles(), ROOT)).toEqual([]);
  });

  it('keep every section of the README before its split, each in the file named for it', () => {
    expect(HOMES.flatMap(homeless)).toEqual([]);
  });

  it("list in that table every heading of f3324c3's README, in order: 45, the two 'Policies' included", () => {
    const joined = HOMES.map(([heading]) => heading).join('\n');
    expect(HOMES).toHaveLength(45);
    expect(createHash('sha256').update(joined).digest('hex')).toBe(OLD_HEADINGS_SHA256);
  });

  it('keep README.md short: at most 250 lines, the Quick start opening before line 40', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const count = linesOf(readme.replace(/\r?\n$/, '')).length;
    const quickStart = headings(readme).find(({ text }) => /quick start/i.test(text));
    const problems = [
      ...(count > 250 ? [`README.md has ${count} lines, more than 250`] : []),
      ...(!quickStart ? ['README.md has no Quick start heading'] : []),
      ...(quickStart && quickStart.line >= 40 ? [`README.md opens the Quick start at line ${quickStart.line}`] : []),
    ];
    expect(problems).toEqual([]);
  });
});

/** A page for the checker to fail on: a misspelt option beside an imported block, a fragment, a block in a block. */
const WRONG_OPTION = `# Orders

\`\`\`ts file=src/orders.controller.ts
import { Controller, Get } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

@Controller('orders')
export class OrdersController {
  @RateLimit({ rps: 10, burst: 50 })
  @Get()
  list(): string[] {
    return [];
  }
}
\`\`\`

\`\`\`ts file=src/app.module.ts
import { Module } from '@nestjs/common';
import { RateLimitModule } from 'nestjs-ratelimit';
import { OrdersController } from './orders.controller.js';

@Module({
  imports: [RateLimitModule.forRoot({ polices: [] })],
  controllers: [OrdersController],
})
export class AppModule {}
\`\`\`

\`\`\`ts fragment
useFactory: (config: ConfigService) => ({ redis: config.get('REDIS_URL') }),
\`\`\`

\`\`\`\`md
\`\`\`ts
not compiled: a block in a block
\`\`\`
\`\`\`\`
`;

/**
 * A second page, with a file of the same name as the first page's: another folder, so neither sees
 * the other's; a list of decorators with a misspelt field; a main.ts on the app's module, which
 * stands in for it.
 */
const WRONG_DECORATOR = `# Exports

\`\`\`ts decorators
@RateLimit({ name: 'exports', algorithm: 'concurrency', limit: 2, lease: '5m' })
@SkipRateLimit('global')
\`\`\`

\`\`\`ts decorators
@RateLimit({ name: 'monthly', algorithm: 'quota', limit: 10_000, periode: 'month' })
\`\`\`

\`\`\`ts
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const app = await NestFactory.create(AppModule);
await app.listen(3000);
\`\`\`

\`\`\`typescript file=src/orders.controller.ts
import { Controller, Get } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';

await Promise.resolve();

@Controller('exports')
export class ExportsController {
  @RateLimit({ rsp: 10 })
  @Get()
  list(): string[] {
    return [];
  }
}
\`\`\`
`;

/** A page with two links that lead nowhere, a file and an anchor, among links that lead somewhere. */
const BROKEN_LINKS = `# Links

## The \`forRoot\` options

See [the options](#the-forroot-options), [again](./page.md#the-forroot-options "title"),
[the other page](other.md#its-heading), ![a picture](other.md), [a folder](./),
[elsewhere](https://example.com/x.md#nowhere) and [mail](mailto:someone@example.com).
Broken: [a file](missing.md) and [an anchor](#no-such-heading).
Not links: \`[code](nowhere.md)\`, and in a block:

\`\`\`md
[fenced](nowhere.md)
\`\`\`

[defined]: other.md#its-heading
`;

/** The 1-based line of `text` that holds `needle`. */
function lineOf(text: string, needle: string): number {
  return linesOf(text).findIndex((line) => line.includes(needle)) + 1;
}

describe('the checker', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rl-docs-check-'));
    await writeFile(join(dir, 'orders.md'), WRONG_OPTION);
    await writeFile(join(dir, 'exports.md'), WRONG_DECORATOR);
    await writeFile(join(dir, 'page.md'), BROKEN_LINKS);
    await writeFile(join(dir, 'other.md'), '# Other\n\n## Its heading\n');
  });

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("reports a misspelt option at its markdown line, each page's blocks in a folder of their own", async () => {
    const files = [join(dir, 'orders.md'), join(dir, 'exports.md')];
    const { diagnostics, pages: counted } = await checkBlocks(files, dir, join(project, 'self-check-blocks'));
    expect(diagnostics).toEqual([
      expect.stringMatching(new RegExp(`^orders\\.md:${lineOf(WRONG_OPTION, 'polices')} .*'polices'`)),
      expect.stringMatching(new RegExp(`^exports\\.md:${lineOf(WRONG_DECORATOR, 'periode')} .*'periode'`)),
      expect.stringMatching(new RegExp(`^exports\\.md:${lineOf(WRONG_DECORATOR, 'rsp:')} .*'rsp'`)),
    ]);
    expect(counted).toEqual([
      { page: 'orders.md', compiled: 2, fragments: 1 },
      { page: 'exports.md', compiled: 4, fragments: 0 },
    ]);
  }, 60_000);

  it('reports a link to a file that is not there and one to a heading that is not there, and only those', () => {
    const line = lineOf(BROKEN_LINKS, 'Broken:');
    expect(brokenLinks([join(dir, 'page.md')], dir)).toEqual([
      `page.md:${line} missing.md: no such file or folder missing.md`,
      `page.md:${line} #no-such-heading: no heading or anchor #no-such-heading in page.md`,
    ]);
  });
});

/** What the package must not ship: the tests, the bench, the sample, the scripts, their builds, a spec. */
const NOT_SHIPPED = /^package\/(test|bench|dist-bench|dist-sample|sample|scripts)\/|[.-]spec\./;

describe('the packed package', () => {
  it('ships the README, the docs, the license and the changelog, and none of the tests or the bench', async () => {
    const { tarball } = await packedPackage();
    const { stdout } = await run('tar', ['-tzf', tarball], { maxBuffer: 16 * 1024 * 1024 });
    const entries = stdout.split('\n').filter(Boolean);
    const docs = markdownUnder('docs').map((file) => `package/${relative(ROOT, file)}`);
    const shipped = ['README.md', 'LICENSE', 'CHANGELOG.md', 'docs/01-getting-started.md', 'dist/index.js'];
    const wanted = [...new Set([...shipped.map((file) => `package/${file}`), ...docs])];
    expect(wanted.filter((entry) => !entries.includes(entry))).toEqual([]);
    expect(entries.filter((entry) => NOT_SHIPPED.test(entry))).toEqual([]);
  });
});
