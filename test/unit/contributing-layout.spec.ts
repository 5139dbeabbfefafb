import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** The folders and files CONTRIBUTING.md's layout names, as paths, from the indentation of its tree. */
function layoutPaths(): string[] {
  const readme = readFileSync(join(ROOT, 'CONTRIBUTING.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Layout'));
  const tree = section.slice(section.indexOf('```\n') + 4, section.indexOf('\n```', section.indexOf('```\n') + 4));
  const parents: string[] = [];
  const paths: string[] = [];
  for (const line of tree.split('\n')) {
    // a name is indented two spaces a level; a description's second line, much further
    const match = /^((?: {2}){0,3})([\w.-]+\/?)(?: |$)/.exec(line);
    if (!match) continue;
    const depth = match[1].length / 2;
    const name = match[2].replace(/\/$/, '');
    const path = [...parents.slice(0, depth), name].join('/');
    paths.push(path);
    if (match[2].endsWith('/')) parents[depth] = name;
  }
  return paths;
}

/** Every folder under `dir`, relative to the root. */
function foldersUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((entry) => [`${dir}/${entry.name}`, ...foldersUnder(`${dir}/${entry.name}`)]);
}

describe("CONTRIBUTING.md's layout", () => {
  const named = layoutPaths();

  it('names only what is there', () => {
    expect(named.filter((path) => !existsSync(join(ROOT, path)))).toEqual([]);
  });

  it('names every folder of lib/ and test/ (test/unit/ mirrors lib/)', () => {
    const folders = [...foldersUnder('lib'), ...foldersUnder('test').filter((folder) => !mirrorsLib(folder))];
    expect(folders.filter((folder) => !named.includes(folder))).toEqual([]);
  });

  it('groups the unit specs by the folder of lib/ they test', () => {
    expect(foldersUnder('test/unit').filter((folder) => !existsSync(join(ROOT, 'lib', unitFolder(folder))))).toEqual(
      [],
    );
  });
});

/** `test/unit/stores/redis` tests `lib/stores/redis`: `stores/redis`. */
function unitFolder(folder: string): string {
  return folder.slice('test/unit/'.length);
}

/** Whether a folder of test/ is one of test/unit/'s, named after a folder of lib/. */
function mirrorsLib(folder: string): boolean {
  return folder.startsWith('test/unit/');
}
