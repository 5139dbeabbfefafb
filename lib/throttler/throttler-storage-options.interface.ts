/**
 * The shape of one key's record in @nestjs/throttler's memory storage, exported under its name
 * for storages written against it. Our storages keep their buckets otherwise.
 */
export interface ThrottlerStorageOptions {
  /** Hits per throttler name. */
  totalHits: Map<string, number>;
  /** When the key's window ends, Unix ms. */
  expiresAt: number;
  /** Whether the key is blocked. */
  isBlocked: boolean;
  /** When the block ends, Unix ms. */
  blockExpiresAt: number;
}

/** A token of the same name, as @nestjs/throttler exports one. */
export const ThrottlerStorageOptions = Symbol('ThrottlerStorageOptions');
