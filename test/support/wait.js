// @ts-check

/**
 * Polls `problem` every 50 ms until it returns '', and rejects with the last problem once
 * `timeoutMs` have passed. A rejection of `problem` (a connection error) counts as a problem.
 * @param {string} what what is awaited, for the error message
 * @param {number} timeoutMs
 * @param {() => Promise<string>} problem '' when ready, else what is still missing
 * @returns {Promise<void>}
 */
export async function waitUntil(what, timeoutMs, problem) {
  const started = Date.now();
  let last = 'not checked yet';
  while (Date.now() - started < timeoutMs) {
    try {
      last = await problem();
      if (!last) return;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
    }
    await delay(50);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${last}`);
}

/** @param {number} ms */
export function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
