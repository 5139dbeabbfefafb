import type { Held, Rule } from '../../algorithms/algorithm.types.js';
import { PACKED_STATES, PACKED_WIDTH } from './packed-state.js';

/** Doubles per bucket: when it expires, then its packed state. */
const ROW = 1 + PACKED_WIDTH;

/**
 * The buckets a `MemoryStore` holds, each a map entry (key to row number) and a row of a
 * `Float64Array`: when it expires, then its state packed (see `PACKED_STATES`), about 140 bytes
 * a bucket with its key. Freed rows are reused; the array grows by doubling up to `maxRows`.
 */
export class BucketTable {
  /** Key to row number. */
  private readonly rowOfKey = new Map<string, number>();
  /** Row number to key, `undefined` for a free row: sweeps scan rows, never the map. Its length is the rows ever used. */
  private readonly keys: (string | undefined)[] = [];
  /** Row `i` is `rows[i * ROW ...]`: expiry time, then the state. */
  private rows = new Float64Array(0);
  /** What a row cannot hold (a sliding window log's timestamps), by row number. */
  private readonly extras = new Map<number, unknown>();
  private readonly freeRows: number[] = [];

  /** @param maxRows rows the array grows to by doubling; past it, one at a time (see `MemoryStoreOptions.maxKeys`) */
  constructor(private readonly maxRows: number) {}

  /** Buckets held, expired ones not yet freed included. */
  get size(): number {
    return this.rowOfKey.size;
  }

  /** Rows ever used: row numbers run below it. */
  get length(): number {
    return this.keys.length;
  }

  /** The key's row, `undefined` when it has none. */
  rowOf(key: string): number | undefined {
    return this.rowOfKey.get(key);
  }

  /** Whether the row holds a bucket. */
  isUsed(row: number): boolean {
    return this.keys[row] !== undefined;
  }

  /** When the row's bucket expires, ms on the store's clock. */
  expiry(row: number): number {
    return this.rows[row * ROW];
  }

  /**
   * The state in a row, `undefined` when there is none or it expired (the row is rewritten or freed
   * after the decision); written in `into` when given (a state of the rule's algorithm).
   */
  read(row: number | undefined, rule: Rule, now: number, into?: Held): Held | undefined {
    if (row === undefined || this.rows[row * ROW] <= now) return undefined;
    return PACKED_STATES[rule.algorithm].read(this.rows, row * ROW + 1, this.extras.get(row), into);
  }

  /** Stores a state in its row, to expire at `expiry` (ms on the store's clock). */
  write(row: number, rule: Rule, state: Held, expiry: number): void {
    this.rows[row * ROW] = expiry;
    const extra = PACKED_STATES[rule.algorithm].write(state, this.rows, row * ROW + 1);
    if (extra !== undefined) this.extras.set(row, extra);
  }

  /** A row for a key that has none. */
  allocate(key: string): number {
    let row = this.freeRows.pop();
    if (row === undefined) {
      row = this.keys.length;
      if (row * ROW >= this.rows.length) {
        // up to maxRows rows, or more for a request whose own buckets are more (see `maxKeys`)
        const grown = new Float64Array(Math.max(row + 1, Math.min(Math.max(1024, (row + 1) * 2), this.maxRows)) * ROW);
        grown.set(this.rows);
        this.rows = grown;
      }
    }
    this.rowOfKey.set(key, row);
    this.keys[row] = key;
    return row;
  }

  /** Drops the key's bucket, if it has one. */
  remove(key: string): void {
    const row = this.rowOfKey.get(key);
    if (row !== undefined) this.free(row);
  }

  /** Drops every bucket whose key starts with `prefix`. */
  removeUnder(prefix: string): void {
    for (let row = 0; row < this.keys.length; row++) if (this.keys[row]?.startsWith(prefix)) this.free(row);
  }

  /** Drops the bucket in a row that holds one. */
  free(row: number): void {
    const key = this.keys[row]!;
    // only the row the map points at is the key's bucket: freeing any other must not drop it
    if (this.rowOfKey.get(key) === row) this.rowOfKey.delete(key);
    this.keys[row] = undefined;
    this.extras.delete(row);
    this.freeRows.push(row);
  }

  /** Drops every bucket and gives the memory back. */
  clear(): void {
    this.rowOfKey.clear();
    this.keys.length = 0;
    this.extras.clear();
    this.freeRows.length = 0;
    this.rows = new Float64Array(0);
  }
}
