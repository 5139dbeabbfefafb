/**
 * Builds an app for a Node process of its own: `lib/`, the fixture and what fixtures share,
 * transpiled file by file to ESM (as ts-jest does for the suites, decorator metadata included),
 * into a directory that resolves packages through a symlink to this repository's node_modules.
 * `npm test` type-checks the sources.
 */
import { mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** What the fixtures share besides `lib/`: how an app process serves and stops (see `serveUntilStopped`). */
const SHARED = ['test/support/processes/app-main.ts'];

/**
 * Transpiles `lib/`, what the fixtures share and `fixture` (a path from the repository's root)
 * into `outDir`; gives the fixture's built path.
 */
export async function buildApp(outDir: string, fixture: string): Promise<string> {
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile);
  if (config.error) throw new Error(ts.flattenDiagnosticMessageText(config.error.messageText, '\n'));
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
  const compilerOptions: ts.CompilerOptions = {
    ...options,
    // ESM output whatever the file (transpileModule does not read package.json's "type")
    module: ts.ModuleKind.ES2022,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    declaration: false,
    sourceMap: false,
    inlineSourceMap: true,
    noEmit: false,
  };
  const libFiles = (await readdir(join(ROOT, 'lib'), { recursive: true }))
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts') && !file.endsWith('.spec.ts'))
    .map((file) => join(ROOT, 'lib', file));
  const entry = join(ROOT, fixture);
  for (const file of [...libFiles, ...SHARED.map((shared) => join(ROOT, shared)), entry]) {
    const { outputText, diagnostics = [] } = ts.transpileModule(await readFile(file, 'utf8'), {
      compilerOptions,
      fileName: file,
      reportDiagnostics: true,
    });
    if (diagnostics.length > 0) {
      throw new Error(
        `${file}: ${diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('; ')}`,
      );
    }
    const out = join(outDir, relative(ROOT, file)).replace(/\.ts$/, '.js');
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, outputText);
  }
  await writeFile(join(outDir, 'package.json'), '{ "type": "module" }\n');
  await symlink(join(ROOT, 'node_modules'), join(outDir, 'node_modules'), 'dir');
  return join(outDir, relative(ROOT, entry)).replace(/\.ts$/, '.js');
}
