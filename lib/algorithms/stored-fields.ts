/**
 * The numbers of a value a Lua mirror stores, `<a>|<b>[|<c>[|<d>]]`, as its `fields` reads them:
 * `undefined` for a field it lacks. The Redis store reads its calls' values back in the app with
 * it (see `AlgorithmDescriptor.decodeStored`).
 *
 * @example storedFields('2.5|1767225600000') // [2.5, 1767225600000, undefined, undefined]
 */
export function storedFields(raw: string): [number, number, number | undefined, number | undefined] {
  const [a, b, c, d] = raw.split('|');
  return [Number(a), Number(b), numberOrNone(c), numberOrNone(d)];
}

function numberOrNone(field: string | undefined): number | undefined {
  return field === undefined || field === '' ? undefined : Number(field);
}
