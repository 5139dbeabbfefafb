import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The shape of lib/, checked: no import circle, and imports that follow a request's path
 * (policy -> keys -> routes -> guard -> limiter -> store -> decision -> headers) without running back up it.
 * A folder lists what it may import; the files at the root (the module, the guard, the service,
 * the options) may import any folder, and no folder imports them, except the few leaves below.
 */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const LIB = join(ROOT, 'lib');

/** Root files every folder may import: texts and tokens, no behaviour of the shell. */
const LEAVES = ['rate-limit.messages.ts', 'rate-limit.constants.ts'];

/** What each folder of lib/ may import besides itself and `LEAVES`. */
const ALLOWED: Record<string, readonly string[]> = {
  algorithms: [],
  utils: [],
  policy: ['algorithms'],
  keys: ['algorithms', 'policy', 'utils'],
  stores: ['algorithms', 'utils'],
  headers: ['algorithms', 'stores'],
  routes: ['algorithms', 'keys', 'policy', 'stores', 'rate-limit-options.ts'],
  // the engine, below the guard and the service that ask it
  limiter: [
    'algorithms',
    'keys',
    'policy',
    'routes',
    'stores',
    'headers',
    'observability',
    'contexts',
    'utils',
    'rate-limit-options.ts',
    'rate-limit.exception.ts',
  ],
  contexts: ['keys', 'stores', 'utils', 'rate-limit.exception.ts', 'rate-limit-options.interface.ts'],
  // the command line replays traffic through what a store and the guard run: decideAll, toDecision, limiting
  simulator: ['algorithms', 'policy', 'keys', 'stores', 'headers'],
  observability: ['keys', 'stores', 'rate-limit-options.interface.ts'],
  // the testing entry sits above the module it configures
  testing: ['policy', 'stores', 'rate-limit.module.ts', 'rate-limit-options.interface.ts'],
  // the store kit hands a store of your own what the built-in ones decide with
  store: ['algorithms', 'stores'],
  // the @nestjs/throttler drop-in: NT's guard on the contexts' seams, its storage on the stores
  throttler: ['algorithms', 'contexts', 'keys', 'observability', 'stores', 'rate-limit.exception.ts'],
};

/** Every .ts file under `dir`, relative to `base`. */
function sources(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path, base);
    return entry.name.endsWith('.ts') ? [relative(base, path)] : [];
  });
}

/** The files of `base` a file imports (relative imports only; `import type` and `export from` included). */
function importsOf(file: string, base: string): string[] {
  const text = readFileSync(join(base, file), 'utf8');
  const found: string[] = [];
  for (const [, specifier] of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+'(\.{1,2}\/[^']+)'/g)) {
    found.push(relative(base, resolve(dirname(join(base, file)), specifier.replace(/\.js$/, '.ts'))));
  }
  return found;
}

/** The import graph of the .ts files under `dir`. */
function graphOf(dir: string): Map<string, string[]> {
  return new Map(sources(dir).map((file) => [file, importsOf(file, dir)]));
}

/** One import circle of `graph`, as the files along it, or `undefined` when there is none. */
function circleIn(graph: Map<string, string[]>): string[] | undefined {
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string): string[] | undefined => {
    if (state.get(file) === 'done') return undefined;
    if (state.get(file) === 'open') return [...path.slice(path.indexOf(file)), file];
    state.set(file, 'open');
    path.push(file);
    for (const next of graph.get(file) ?? []) {
      const circle = visit(next);
      if (circle) return circle;
    }
    path.pop();
    state.set(file, 'done');
    return undefined;
  };
  for (const file of graph.keys()) {
    const circle = visit(file);
    if (circle) return circle;
  }
  return undefined;
}

/** A file's folder under lib/ (`stores` for stores/redis/x.ts), or the file itself at the root. */
const placeOf = (file: string): string => (file.includes('/') ? file.split('/')[0] : file);

describe('the shape of lib/', () => {
  const graph = graphOf(LIB);

  it('has no import circle', () => {
    expect(circleIn(graph)).toBeUndefined();
  });

  it('imports along the path a request takes, never back up it', () => {
    const wrong: string[] = [];
    for (const [file, imports] of graph) {
      const from = placeOf(file);
      const allowed = ALLOWED[from];
      if (allowed === undefined) continue; // a root file
      for (const target of imports) {
        const to = placeOf(target);
        if (to !== from && !LEAVES.includes(to) && !allowed.includes(to)) wrong.push(`${file} imports ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('knows every folder', () => {
    const folders = new Set([...graph.keys()].filter((file) => file.includes('/')).map(placeOf));
    expect([...folders].sort()).toEqual(Object.keys(ALLOWED).sort());
  });
});

/**
 * The files that know what a request owes at its end: the obligation's reading (from the
 * descriptor or the policy's fields), what an admitted request keeps for it, and what the engine
 * does when the request ends. A new obligation (as the settle of the real cost was) touches
 * these and its descriptor or policy field, nothing else: the guard, the interceptors, the seams,
 * the decorator and the module read only whether a policy owes anything at all (`atEnd`). (A
 * settle also hears the handler's values and lends its meters: the outcome interceptor hands both
 * to the request's end, whatever it owes.)
 */
const OBLIGATION_FILES = ['policy/obligations.ts', 'limiter/request-end.ts', 'limiter/rate-limiter.ts'];
/** The obligations a request settles at its end, as `Obligations` names them, and the lists `Owed` keeps them in. */
const AT_END =
  /\b(owes|\w*[oO]bligations(Of)?\([^)]*\))\.(refundOnSuccess|latency|release|settle)\b|\bowed\.(refunds|releases|latencies|settles)\b/;

describe('what a request owes at its end', () => {
  it(`is known in ${OBLIGATION_FILES.join(', ')} alone (and a subscription's check, which refuses slots)`, () => {
    const knowing = sources(LIB).filter((file) => AT_END.test(readFileSync(join(LIB, file), 'utf8')));
    expect(knowing.sort()).toEqual([...OBLIGATION_FILES, 'routes/route-policies.ts'].sort());
  });

  it('is met by its pattern where it is written', () => {
    expect(AT_END.test('if (owes.refundOnSuccess) owed.refunds.push(decision)')).toBe(true);
    expect(AT_END.test('resolvedObligations(resolved).release')).toBe(true);
    expect(AT_END.test('obligationsOf(each).atEnd')).toBe(false);
  });
});

describe('the shape of bench/', () => {
  it('has no import circle', () => {
    expect(circleIn(graphOf(join(ROOT, 'bench')))).toBeUndefined();
  });
});

describe('circleIn', () => {
  it('finds a circle, and none where there is none', () => {
    expect(
      circleIn(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a']],
        ]),
      ),
    ).toEqual(['a', 'b', 'c', 'a']);
    expect(
      circleIn(
        new Map([
          ['a', ['b', 'c']],
          ['b', ['c']],
          ['c', []],
        ]),
      ),
    ).toBeUndefined();
  });
});
