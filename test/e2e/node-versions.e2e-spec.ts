/**
 * The unit tests under every Node the package supports beside the one running Jest: the unit
 * project (`jest --selectProjects unit`, no Redis) runs whole under Node 22 and under Node 24, the
 * npm registry's builds (test/support/processes/node-builds.ts), each in a Jest process of its
 * own. The packed package's apps run under them in nest11.e2e-spec.ts and nest12.e2e-spec.ts.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { childEnv, nodeBuild } from '../support/processes/node-builds.js';
import { OTHER_NODES } from '../support/processes/smoke-apps.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const JEST = fileURLToPath(new URL('../../node_modules/jest/bin/jest.js', import.meta.url));

test.each(OTHER_NODES)(
  'the unit project passes under Node %i',
  async (major) => {
    const node = await nodeBuild(major);
    const started = performance.now();
    const result = await promisify(execFile)(node.path, [JEST, '--selectProjects', 'unit', '--ci'], {
      cwd: ROOT,
      env: childEnv({ NODE_OPTIONS: '--experimental-vm-modules' }),
      maxBuffer: 64 * 1024 * 1024,
    }).then(
      ({ stderr }) => ({ failed: false, stderr }),
      (error: Error & { stderr?: string }) => ({ failed: true, stderr: error.stderr || error.message }),
    );
    const summary = result.stderr.split('\n').filter((line) => /^(Tests|Test Suites):/.test(line));
    console.log(
      `unit project on Node ${node.version}: ${((performance.now() - started) / 1000).toFixed(1)} s\n${summary.join('\n')}`,
    );
    // on a failure, Jest's summary of the failing tests (which spec, which test, why), or all it wrote
    const report = result.stderr.slice(Math.max(0, result.stderr.indexOf('Summary of all failing tests')));
    expect({ failed: result.failed, report: result.failed ? report : '' }).toEqual({
      failed: false,
      report: '',
    });
  },
  300_000,
);
