import { DECIDE_LUA, LIBRARY as FUNCTIONS, LIBRARY_LUA, REFUND_LUA } from '../../../../lib/stores/redis/decide.lua.js';
import { FLAT_CALL_LUA, FLAT_LUA } from '../../../../lib/stores/redis/flat.lua.js';
import { TIME_PROBE_LUA } from '../../../../lib/stores/redis/time-probe.js';

/**
 * What lets the scripts run on Redis-compatible servers (Valkey, KeyDB, Dragonfly, ElastiCache,
 * Redis Cluster): every key a command touches comes from KEYS (a server may route, lock or refuse
 * by the declared keys: none is built from ARGV), and only Lua 5.1's common core is used (what
 * later Lua versions and every server still have; Dragonfly runs 5.4, without Redis's libraries
 * bit, cjson, cmsgpack, struct being a given elsewhere). Read from the scripts' text.
 */

const SCRIPTS: ReadonlyArray<[string, string]> = [
  ['decide', DECIDE_LUA],
  ['flat', FLAT_LUA],
  ['refund', REFUND_LUA],
  ['TIME probe', TIME_PROBE_LUA],
];

/** Library functions the scripts may call: Lua 5.1's, kept by 5.2 to 5.4, and Redis's `redis.*` core. */
const LIBRARY = new Set([
  ...[
    'format',
    'gmatch',
    'match',
    'find',
    'sub',
    'gsub',
    'len',
    'rep',
    'byte',
    'char',
    'lower',
    'upper',
    'reverse',
  ].map((f) => `string.${f}`),
  ...['abs', 'ceil', 'floor', 'max', 'min', 'fmod', 'sqrt', 'exp', 'log', 'huge'].map((f) => `math.${f}`),
  ...['insert', 'remove', 'sort', 'concat'].map((f) => `table.${f}`),
  ...['call', 'pcall', 'error_reply', 'status_reply'].map((f) => `redis.${f}`),
]);
/** Global functions the scripts may call: Lua 5.1's base (`unpack`: Redis's 5.1, and Dragonfly keeps it for 5.1 scripts). */
const GLOBALS = new Set([
  'tonumber',
  'tostring',
  'type',
  'unpack',
  'pairs',
  'ipairs',
  'select',
  'error',
  'pcall',
  'assert',
  'next',
  'setmetatable',
]);
/** Words followed by `(` that are no call. */
const KEYWORDS = new Set(['if', 'elseif', 'while', 'until', 'return', 'and', 'or', 'not', 'in', 'function', 'local']);
/** Commands that touch no key. */
const KEYLESS = new Set(['TIME']);
/** What a key argument may be: a key the script was given (or a run of them), or a variable that holds one. */
const KEY_ARGUMENT = /^(KEYS\[[^\]]+\]|unpack\(KEYS\b.*\)|key|s\.key)$/;

/** A script without its comments. */
const uncommented = (lua: string) => lua.replace(/--[^\n]*/g, '');
/** A script without its comments, and its string literals emptied. */
const code = (lua: string) => uncommented(lua).replace(/'[^'\n]*'|"[^"\n]*"/g, "''");

/** The arguments of the call whose `(` is at `open`, split at its top-level commas, trimmed. */
function argumentsAt(text: string, open: number): string[] {
  const args: string[] = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') {
      if (--depth === 0) return [...args, text.slice(start, i).trim()].filter((arg) => arg !== '');
    } else if (c === ',' && depth === 1) {
      args.push(text.slice(start, i).trim());
      start = i + 1;
    }
  }
  throw new Error(`unclosed call at ${open}`);
}

/** Every place a script passes a key where one is wanted that is not a given key: empty when KEYS holds them all. */
function undeclaredKeys(lua: string): string[] {
  const text = uncommented(lua);
  const problems: string[] = [];
  let commands = 0;
  for (const call of text.matchAll(/redis\.p?call\(/g)) {
    const [command, key] = argumentsAt(text, call.index + call[0].length - 1);
    commands++;
    if (!KEYLESS.has(command.replace(/'/g, '')) && !KEY_ARGUMENT.test(key ?? ''))
      problems.push(`redis.call(${command}, ${key}, ...)`);
  }
  // the script's own functions that take a key: every call passes them one of the above
  const takesKey = new Map<string, number>();
  for (const [, name, params] of text.matchAll(/function\s+([\w.]+)\(([^)]*)\)/g)) {
    const index = params
      .split(',')
      .map((p) => p.trim())
      .indexOf('key');
    // `a.load` is called as `m.load`: by its member name, with the dot
    if (index >= 0) takesKey.set(name.includes('.') ? name.slice(name.lastIndexOf('.')) : name, index);
  }
  for (const call of text.matchAll(/(\.?)(\w+)\(/g)) {
    const index = takesKey.get(call[1] + call[2]);
    if (index === undefined || /function\s+[\w.]*$/.test(text.slice(0, call.index))) continue;
    const key = argumentsAt(text, call.index + call[0].length - 1)[index];
    if (!KEY_ARGUMENT.test(key ?? '')) problems.push(`${call[1]}${call[2]}(...) passes ${key} as its key`);
  }
  // and `key`, `s.key` only ever hold what was passed: never assigned but as `{ key = key }` or `{ key = s.key }`
  for (const assignment of code(lua).matchAll(/(local\s+)?\bkey\s*=(?!=)\s*([^,}\n]*)/g)) {
    if (assignment[1] !== undefined || !/^(s\.)?key$/.test(assignment[2].trim()))
      problems.push(`key assigned: ${assignment[0].trim()}`);
  }
  if (/\bKEYS\s*(\[[^\]]*\])?\s*=(?!=)/.test(code(lua))) problems.push('KEYS written');
  if (commands === 0) problems.push('no redis.call found');
  return problems;
}

/** Every library or global function, and every syntax, of a script outside Lua 5.1's common core. */
function outsideCore(lua: string): string[] {
  const text = code(lua);
  const problems: string[] = [];
  const own = new Set(
    [...text.matchAll(/local\s+function\s+(\w+)|local\s+(\w+(?:\s*,\s*\w+)*)/g)].flatMap(([, f, v]) =>
      f === undefined ? v.split(/\s*,\s*/) : [f],
    ),
  );
  for (const [member] of text.matchAll(
    /\b(string|math|table|os|io|coroutine|debug|package|bit|bit32|utf8|cjson|cmsgpack|struct|redis)\.\w+/g,
  )) {
    if (!LIBRARY.has(member)) problems.push(member);
  }
  for (const call of text.matchAll(/(^|[^\w.:])(\w+)\s*\(/g)) {
    const name = call[2];
    if (
      KEYWORDS.has(name) ||
      own.has(name) ||
      GLOBALS.has(name) ||
      /function\s*$/.test(text.slice(0, call.index + call[1].length))
    )
      continue;
    problems.push(`${name}()`);
  }
  const syntax: Array<[RegExp, string]> = [
    [/\bgoto\b|::\w+::/, 'goto (5.2)'],
    [/\/\//, 'integer division // (5.3)'],
    [/&|\||<<|>>|~(?!=)/, 'bitwise operators (5.3)'],
    [/^#!/, 'a shebang (Redis 7 only)'],
  ];
  for (const [pattern, what] of syntax) if (pattern.test(text)) problems.push(what);
  return problems;
}

describe('the Redis scripts', () => {
  it.each(SCRIPTS)('%s: every key a command touches is one of KEYS', (_name, lua) => {
    expect(undeclaredKeys(lua)).toEqual([]);
  });

  it.each(SCRIPTS)('%s: uses only Lua 5.1 functions and syntax that later versions kept', (_name, lua) => {
    expect(outsideCore(lua)).toEqual([]);
  });

  it("the library of functions defines the scripts' calls, under names of its own", () => {
    const calls = DECIDE_LUA.replace(/local decide_call = define_calls\(\)\nreturn decide_call\(KEYS, ARGV\)\n$/, '');
    expect(REFUND_LUA.replace(/local _, refund_call = define_calls\(\)\nreturn refund_call\(KEYS, ARGV\)\n$/, '')).toBe(
      calls,
    );
    expect(LIBRARY_LUA.startsWith(`#!lua name=${FUNCTIONS.name}\n${calls}`)).toBe(true);
    const registered = [
      ...LIBRARY_LUA.matchAll(
        /redis\.register_function\('(\w+)', function\(keys, args\) defined\(\) return (\w+)\(keys, args\) end\)/g,
      ),
    ];
    expect(registered.map(([, name, call]) => [name, call])).toEqual([
      [FUNCTIONS.decide, 'decide_call'],
      [FUNCTIONS.refund, 'refund_call'],
    ]);
    // the flat call: the script's text, its numbers kept by the library
    expect(LIBRARY_LUA).toContain(FLAT_CALL_LUA);
    expect(LIBRARY_LUA).toContain(`redis.register_function('${FUNCTIONS.flat}', flat_call)`);
    expect(FLAT_CALL_LUA.replace(/\(flat_numbers\[([^\]]*\])\] or flat_number\(\1\)\)/g, '($1 + 0)')).toContain(
      FLAT_LUA.replace(/return flat_call\(KEYS, ARGV\)\n$/, ''),
    );
  });

  it('the checks find what they look for', () => {
    const bad = `
local function get(key) return redis.call('GET', key) end
local function built(id) return redis.call('GET', 'rl:' .. id) end
local values = redis.call('MGET', unpack(ARGV))
local v = get(ARGV[1] .. ':x')
local key = ARGV[2]
redis.call('SET', KEYS[1], table.unpack({ 1 }), bit.band(1, 2), 7 // 2, loadstring('x'))
goto done
`;
    expect(undeclaredKeys(bad)).toEqual([
      "redis.call('GET', 'rl:' .. id, ...)",
      "redis.call('MGET', unpack(ARGV), ...)",
      "get(...) passes ARGV[1] .. ':x' as its key",
      'key assigned: local key = ARGV[2]',
    ]);
    expect(outsideCore(bad)).toEqual([
      'table.unpack',
      'bit.band',
      'loadstring()',
      'goto (5.2)',
      'integer division // (5.3)',
    ]);
  });
});
