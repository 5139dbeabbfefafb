/**
 * The `k`-th smallest of `values` (0-based), by quickselect: O(n) on average, no allocation.
 * Reorders `values` so that the `k + 1` smallest come first.
 *
 * @example kthSmallest(Float64Array.of(5, 1, 4, 2, 3), 1)  // 2
 */
export function kthSmallest(values: Float64Array, k: number): number {
  let low = 0;
  let high = values.length - 1;
  while (low < high) {
    const pivot = values[(low + high) >>> 1];
    let i = low;
    let j = high;
    while (i <= j) {
      while (values[i] < pivot) i++;
      while (values[j] > pivot) j--;
      if (i <= j) {
        const swap = values[i];
        values[i++] = values[j];
        values[j--] = swap;
      }
    }
    if (k <= j) high = j;
    else if (k >= i) low = i;
    else return values[k];
  }
  return values[k];
}
