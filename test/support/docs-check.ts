/**
 * The checks that keep the markdown docs honest (test/e2e/docs.e2e-spec.ts): their TypeScript
 * blocks compiled as an app's files against the built package, their relative links followed to a
 * file, a folder or a heading, their headings read as GitHub reads them. Everything here takes the
 * markdown files it checks, so the checks can be tried on a page made up for the purpose.
 *
 * A block is compiled when its info string's first word is `ts` or `typescript`; the words after it:
 * - `fragment`: an excerpt, not compiled;
 * - `decorators`: decorators of a handler (`@RateLimit({ ... })`), compiled on a method of a class
 *   with `RateLimit` and `SkipRateLimit` imported;
 * - `file=<relative path>`: written to that path in its page's folder, where the page's other blocks
 *   can import it (`file=src/app.module.ts` imports `./orders.controller.js` from
 *   `file=src/orders.controller.ts`); a block without it is `block-<line of its fence>.ts` there.
 * A block at the root of its page's folder that imports `./app.module.js` (your app's module, in a
 * `main.ts`) gets an empty `AppModule` there when no block of the page is that file.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, resolve } from 'node:path';
import ts from 'typescript';

/** A fenced code block: the lines of its fences (1-based), its info string, its lines as written. */
export interface Fence {
  line: number;
  end: number;
  info: string;
  body: string[];
  closed: boolean;
}

/** An opening or closing fence: its indentation, its run of backticks or tildes, what follows. */
const FENCE = /^( *)(`{3,}|~{3,})(.*)$/;

/** Whether `match` (of FENCE) closes a block opened by `marker`: as many of its character or more, nothing after. */
function closes(match: RegExpExecArray | null, marker: string): boolean {
  return !!match && match[2][0] === marker[0] && match[2].length >= marker.length && match[3].trim() === '';
}

/** `line` without the first `indent` spaces of its indentation (those of its block's fence). */
function dedent(line: string, indent: number): string {
  return line.replace(new RegExp(`^ {0,${indent}}`), '');
}

/** The lines of `text`, CRLF or LF. */
export function linesOf(text: string): string[] {
  return text.split(/\r?\n/);
}

/** The fenced code blocks of `text`; a fence inside a block (shorter, or of the other character) is its text. */
export function fences(text: string): Fence[] {
  const lines = linesOf(text);
  const found: Fence[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]);
    if (!open || (open[2][0] === '`' && open[3].includes('`'))) continue;
    const fence: Fence = { line: i + 1, end: lines.length, info: open[3].trim(), body: [], closed: false };
    for (i++; i < lines.length; i++) {
      if (closes(FENCE.exec(lines[i]), open[2])) {
        Object.assign(fence, { end: i + 1, closed: true });
        break;
      }
      fence.body.push(dedent(lines[i], open[1].length));
    }
    found.push(fence);
  }
  return found;
}

/** `text` with the lines of its fenced blocks, fences included, emptied: its prose, line for line. */
export function prose(text: string): string {
  const lines = linesOf(text);
  for (const { line, end } of fences(text)) lines.fill('', line - 1, end);
  return lines.join('\n');
}

/** A heading outside the fenced blocks: its text as written (closing `#`s left out), its line. */
export interface Heading {
  text: string;
  line: number;
}

/** A line that cannot be the text of a setext heading: blank, a heading, a list item, a quote, a table row. */
const NOT_SETEXT_TEXT = /^\s*$|^ {0,3}(#{1,6}(\s|$)|[-*+]\s|\d+[.)]\s|>|\|)/;

/** The headings of `text`, ATX (`## Tiers`) and setext (a line underlined with `===` or `---`). */
export function headings(text: string): Heading[] {
  const lines = linesOf(prose(text));
  return lines.flatMap((line, i): Heading[] => {
    const atx = /^ {0,3}#{1,6}(?:[ \t]+(.*))?$/.exec(line);
    if (atx) return [{ text: (atx[1] ?? '').replace(/(^|[ \t]+)#+[ \t]*$/, '').trim(), line: i + 1 }];
    const underline = /^ {0,3}(=+|-+)[ \t]*$/.test(line);
    return underline && i > 0 && !NOT_SETEXT_TEXT.test(lines[i - 1]) ? [{ text: lines[i - 1].trim(), line: i }] : [];
  });
}

/** A heading's text as GitHub renders it: links and images as their text, no code ticks, no HTML tags. */
function rendered(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/`/g, '');
}

/** GitHub's anchor for a heading, before a repeat's `-1`: lowercase letters, digits, `-` and `_`, spaces as `-`. */
export function slug(heading: string): string {
  return rendered(heading)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor of `text`: its headings' slugs, a repeat's with `-1`, `-2`…, and its `<a id>` and `<a name>`. */
export function anchors(text: string): Set<string> {
  const found = new Set<string>();
  for (const heading of headings(text)) {
    const base = slug(heading.text);
    let anchor = base;
    for (let n = 1; found.has(anchor); n++) anchor = `${base}-${n}`;
    found.add(anchor);
  }
  for (const [, id] of prose(text).matchAll(/<a\s[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']/gi)) found.add(id);
  return found;
}

/** `text` with every character of `pattern`'s matches but line breaks turned into spaces: lines and offsets kept. */
function blank(text: string, pattern: RegExp): string {
  return text.replace(pattern, (matched) => matched.replace(/[^\n]/g, ' '));
}

/** `text`'s prose without what holds no link: code spans (within a paragraph), HTML comments, escaped brackets. */
function linkable(text: string): string {
  const bare = blank(blank(prose(text), /<!--[\s\S]*?-->/g), /\\[[\]()`]/g);
  return bare
    .split(/(\n[ \t]*\n)/)
    .map((paragraph) => blank(paragraph, /(?<!`)(`+)(?!`)[\s\S]*?[^`]\1(?!`)/g))
    .join('');
}

/** A link's target and the line it is on. */
export interface Link {
  target: string;
  line: number;
}

/** An inline link or image from its `[`: text (brackets nested once, no blank line), then `(target "title")`. */
const INLINE =
  /\[(?:[^[\]\n]|\n(?![ \t]*\n)|\[[^[\]\n]*\])*\]\(\s*(<[^>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/y;

/** A reference definition, `[id]: target "title"` (a footnote, `[^1]: text`, is not one). */
const DEFINITION = /^ {0,3}\[(?!\^)[^\]]+\]:[ \t]*(<[^>]*>|\S+)/gm;

/** An HTML link or image: `<a href="target">`, `<img src="target">`. */
const HTML_TARGET = /<(?:a|img)\s[^>]*?\b(?:href|src)\s*=\s*["']([^"']*)["']/gi;

/** The 1-based line of `offset` in `text`. */
function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) line++;
  return line;
}

/** Every link of `text` outside code: inline links and images, reference definitions, HTML `href` and `src`. */
export function links(text: string): Link[] {
  const bare = linkable(text);
  const found: { target: string; at: number }[] = [];
  for (let at = bare.indexOf('['); at !== -1; at = bare.indexOf('[', at + 1)) {
    INLINE.lastIndex = at;
    const match = INLINE.exec(bare);
    if (match) found.push({ target: match[1], at });
  }
  for (const pattern of [DEFINITION, HTML_TARGET])
    for (const match of bare.matchAll(pattern)) found.push({ target: match[1], at: match.index });
  return found
    .sort((a, b) => a.at - b.at)
    .map(({ target, at }) => ({ target: target.replace(/^<(.*)>$/, '$1'), line: lineAt(bare, at) }));
}

/** Reads markdown files once each. */
class Pages {
  private readonly texts = new Map<string, string>();
  private readonly anchorSets = new Map<string, Set<string>>();

  /** The text of `file`. */
  text(file: string): string {
    if (!this.texts.has(file)) this.texts.set(file, readFileSync(file, 'utf8'));
    return this.texts.get(file)!;
  }

  /** The anchors of `file`. */
  anchors(file: string): Set<string> {
    if (!this.anchorSets.has(file)) this.anchorSets.set(file, anchors(this.text(file)));
    return this.anchorSets.get(file)!;
  }
}

/** Whether `target` has a scheme (`https:`, `mailto:`…) or is protocol-relative: not a file of the repository. */
function external(target: string): boolean {
  return /^[a-z][a-z\d+.-]*:|^\/\//i.test(target);
}

/** Why the relative `target` of `file` leads nowhere, or undefined when it leads somewhere; `/` starts at `root`. */
function deadEnd(file: string, target: string, root: string, pages: Pages): string | undefined {
  const hash = target.indexOf('#');
  const path = (hash === -1 ? target : target.slice(0, hash)).replace(/\?.*$/, '');
  let to: string;
  let anchor: string;
  try {
    const decoded = decodeURI(path);
    to = path === '' ? file : decoded.startsWith('/') ? join(root, decoded) : resolve(dirname(file), decoded);
    anchor = hash === -1 ? '' : decodeURIComponent(target.slice(hash + 1));
  } catch {
    return 'a malformed %-escape';
  }
  if (!existsSync(to)) return `no such file or folder ${relative(root, to)}`;
  if (anchor === '' || !to.endsWith('.md') || !statSync(to).isFile() || pages.anchors(to).has(anchor)) return undefined;
  return `no heading or anchor #${anchor} in ${relative(root, to)}`;
}

/**
 * Every relative link of `files` (markdown files) that leads nowhere: a file or folder that is not
 * there, an anchor that no heading of the markdown file gives. One line each, `<file>:<line>
 * <target>: <why>`, files named from `root`; a file of `files` that is not there is one line too.
 */
export function brokenLinks(files: readonly string[], root: string): string[] {
  const pages = new Pages();
  return files.flatMap((file) => {
    if (!existsSync(file)) return [`${relative(root, file)}: no such file`];
    return links(pages.text(file))
      .filter(({ target }) => !external(target))
      .flatMap(({ target, line }) => {
        const why = deadEnd(file, target, root, pages);
        return why ? [`${relative(root, file)}:${line} ${target}: ${why}`] : [];
      });
  });
}

/**
 * A TypeScript block of a page: its fence's line, its code, whether it is a fragment, its `file=`
 * if any, what is wrong with its info string.
 */
export interface TsBlock {
  line: number;
  code: string;
  fragment: boolean;
  decorators: boolean;
  file?: string;
  problems: string[];
}

/** What a `decorators` block is compiled in: the lines before its own, and those after. */
const ON_A_HANDLER = {
  before: ["import { RateLimit, SkipRateLimit } from 'nestjs-ratelimit';", 'export class Handlers {'],
  after: ['  handler(): void {}', '}'],
};

/** The stand-in for the app's module that a page's `main.ts` imports. */
const STAND_IN_APP_MODULE = "import { Module } from '@nestjs/common';\n\n@Module({})\nexport class AppModule {}\n";

/** The TypeScript blocks of `text`, read from their info strings (`ts fragment`, `ts file=src/app.module.ts`). */
export function tsBlocks(text: string): TsBlock[] {
  return fences(text).flatMap(({ line, info, body }): TsBlock[] => {
    const [language, ...words] = info.split(/\s+/);
    if (!['ts', 'typescript'].includes(language.toLowerCase())) return [];
    const block: TsBlock = { line, code: body.join('\n'), fragment: false, decorators: false, problems: [] };
    for (const word of words) {
      if (word === 'fragment') block.fragment = true;
      else if (word === 'decorators') block.decorators = true;
      else if (word.startsWith('file=')) block.file = word.slice('file='.length);
      else
        block.problems.push(
          `unknown word '${word}' in the info string (known: fragment, decorators, file=<relative path>)`,
        );
    }
    if (block.file !== undefined && !/^[^/\\].*\.[cm]?ts$/.test(block.file)) {
      block.problems.push(`file=${block.file}: a relative path to a .ts, .mts or .cts file`);
    }
    if (block.file !== undefined && (isAbsolute(block.file) || normalize(block.file).startsWith('..'))) {
      block.problems.push(`file=${block.file}: outside the page's folder`);
    }
    return [block];
  });
}

/** The compiler options of a NestJS app, for the blocks: no output, only the diagnostics. */
export const APP_COMPILER_OPTIONS: ts.CompilerOptions = {
  strict: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2022.d.ts'],
  types: ['node'],
  skipLibCheck: true,
  esModuleInterop: true,
  noEmit: true,
};

/** How many blocks of a page were compiled, and how many fragments were not. */
export interface PageBlocks {
  page: string;
  compiled: number;
  fragments: number;
}

/** What compiling the blocks of some pages gave: a line per diagnostic, the counts per page, the compile's ms. */
export interface BlockCheck {
  diagnostics: string[];
  pages: PageBlocks[];
  ms: number;
}

/** Where a block's file came from: its page (named from the root) and the page's line of its first line. */
interface Origin {
  page: string;
  first: number;
}

/** Something wrong at a line of a page (or of another file the program read), before it is a line of text. */
interface Finding {
  page: string;
  line: number;
  message: string;
}

/**
 * The folder of `page`'s blocks in `dir`: `readme/` for README.md, `01-getting-started/` for
 * docs/01-getting-started.md.
 */
export function pageFolder(dir: string, page: string): string {
  const name = page
    .replace(/\.md$/i, '')
    .replace(/^docs\//, '')
    .replace(/[/\\]/g, '-')
    .toLowerCase();
  return join(dir, name);
}

/** What is wrong with the fences and info strings of `text`, a page named `page`. */
function markupFindings(page: string, text: string): Finding[] {
  const unclosed = fences(text).filter(({ closed }) => !closed);
  return [
    ...unclosed.map(({ line }) => ({ page, line, message: 'a fence that is never closed' })),
    ...tsBlocks(text).flatMap(({ line, problems }) => problems.map((message) => ({ page, line, message }))),
  ];
}

/**
 * Writes the blocks of `files` to be compiled into their pages' folders in `dir`. Gives where each
 * file came from, the counts per page, and what is wrong with the pages' fences and info strings.
 */
async function writeBlocks(
  files: readonly string[],
  root: string,
  dir: string,
): Promise<{ origins: Map<string, Origin>; pages: PageBlocks[]; findings: Finding[] }> {
  const origins = new Map<string, Origin>();
  const pages: PageBlocks[] = [];
  const findings: Finding[] = [];
  for (const file of files) {
    const page = relative(root, file);
    const text = await readFile(file, 'utf8');
    const blocks = tsBlocks(text);
    const compiled = blocks.filter((block) => !block.fragment && block.problems.length === 0);
    findings.push(...markupFindings(page, text));
    for (const block of compiled) {
      const path = resolve(pageFolder(dir, page), block.file ?? `block-${block.line}.ts`);
      if (origins.has(path))
        findings.push({ page, line: block.line, message: `file=${block.file} is another block's` });
      const { before, after } = block.decorators ? ON_A_HANDLER : { before: [], after: [] };
      origins.set(path, { page, first: block.line + 1 - before.length });
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, [...before, block.code, ...after].join('\n'));
    }
    const appModule = resolve(pageFolder(dir, page), 'app.module.ts');
    if (compiled.some((block) => block.file === undefined) && !origins.has(appModule))
      await writeFile(appModule, STAND_IN_APP_MODULE);
    pages.push({ page, compiled: compiled.length, fragments: blocks.filter((block) => block.fragment).length });
  }
  return { origins, pages, findings };
}

/** A diagnostic at the line of the page its block came from, or at its own file's line when not in a block. */
function located(diagnostic: ts.Diagnostic, origins: Map<string, Origin>): Finding {
  const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
  if (!diagnostic.file || diagnostic.start === undefined) return { page: '', line: 0, message };
  const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
  const origin = origins.get(resolve(diagnostic.file.fileName));
  return origin
    ? { page: origin.page, line: origin.first + line, message }
    : { page: diagnostic.file.fileName, line: line + 1, message };
}

/** `findings` in the order of `pages`, then of their lines (those elsewhere last), as `<page>:<line> <message>`. */
function inPageOrder(findings: Finding[], pages: PageBlocks[]): string[] {
  const rank = (page: string) => {
    const index = pages.findIndex((counted) => counted.page === page);
    return index === -1 ? pages.length : index;
  };
  return findings
    .map((finding, i) => ({ ...finding, i }))
    .sort((a, b) => rank(a.page) - rank(b.page) || a.line - b.line || a.i - b.i)
    .map(({ page, line, message }) => (page ? `${page}:${line} ${message}` : message));
}

/**
 * Compiles every TypeScript block of `files` (markdown files) in one program with a NestJS app's
 * options, each page's blocks written to a folder of its own in `dir` (a folder of a project whose
 * package.json says `"type": "module"` and whose node_modules has the package and its peers).
 * Gives every diagnostic as `<file>:<line> <message>`, at the line of the markdown file, files
 * named from `root`, in the order of `files` and their lines; a fence never closed and an info
 * string it cannot read are diagnostics too.
 */
export async function checkBlocks(files: readonly string[], root: string, dir: string): Promise<BlockCheck> {
  const { origins, pages, findings } = await writeBlocks(files, root, dir);
  const started = performance.now();
  const program = ts.createProgram([...origins.keys()], APP_COMPILER_OPTIONS);
  const diagnostics = ts.getPreEmitDiagnostics(program).map((diagnostic) => located(diagnostic, origins));
  const ms = Math.round(performance.now() - started);
  return { diagnostics: inPageOrder([...findings, ...diagnostics], pages), pages, ms };
}
