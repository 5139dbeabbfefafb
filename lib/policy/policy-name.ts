import { expectedPolicyName } from '../rate-limit.messages.js';
import type { Fail } from './invalid-policy.js';

/**
 * Longest explicit policy name (and tier name), characters. The name is in every bucket key, next
 * to the prefix and 24 characters of tag and digest, and twice in the RateLimit headers of every
 * response: 64 is room for any descriptive name, and anything longer is a value pasted by
 * mistake. Default names (`Controller.handler`) are never refused, however long.
 */
export const MAX_NAME_LENGTH = 64;
/** Visible ASCII without braces: fit for a header value and the bucket key (braces would make a Cluster hash tag). */
const NAME_CHARS = /^[\x21-\x7a|~]+$/;

/** Whether `name` is fit to name a policy or a tier: 1 to `MAX_NAME_LENGTH` visible ASCII characters, no braces. */
export function isName(name: unknown): name is string {
  return typeof name === 'string' && NAME_CHARS.test(name) && name.length <= MAX_NAME_LENGTH;
}

/**
 * A default name (`Controller.handler`, `Controller`) made fit for keys and headers, so that no
 * identifier can make start fail: what is not visible ASCII (a non-ASCII letter, a space or a
 * brace in a computed method name) is percent-encoded as UTF-8.
 */
export function defaultPolicyName(name: string): string {
  const encoded = name.replace(/[^\x21-\x7a|~]/gu, (char) =>
    Buffer.from(char).toString('hex').toUpperCase().replace(/../g, '%$&'),
  );
  return encoded === '' ? 'anonymous' : encoded;
}

/** A policy's `name`, or the one it gets where it stands (`defaultName`, made fit) when it gives none. */
export function resolveName(name: unknown, defaultName: string, fail: Fail): string {
  if (name === undefined) return defaultPolicyName(defaultName);
  if (!isName(name)) fail('name', name, expectedPolicyName(MAX_NAME_LENGTH));
  return name;
}
