/**
 * JSON with exact 64-bit integers. `JSON.parse` rounds an integer literal beyond 2^53 to the nearest
 * double (18446744073709551615 becomes 18446744073709551616), which breaks FT's uint64 random_seed;
 * here such literals come back as bigints, and bigints are written back as integer literals.
 */

/** A string token, or a number token (strings first, so digits inside strings are skipped). */
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
/** What an unsafe integer literal is carried as through JSON.parse / JSON.stringify. */
const MARK = '\u0000bigint:';
const MARKED = /"\\u0000bigint:(-?\d+)"/g;

/** `JSON.parse`, but an integer literal that is not a safe integer comes back as an exact bigint. */
export function parseExactJson(text: string): unknown {
  if (!/\d{16}/.test(text)) return JSON.parse(text) as unknown;
  let marked = false;
  const rewritten = text.replace(TOKENS, (token) => {
    if (token.startsWith('"') || /[.eE]/.test(token) || Number.isSafeInteger(Number(token))) return token;
    marked = true;
    return `"\\u0000bigint:${token}"`;
  });
  if (!marked) return JSON.parse(text) as unknown;
  return JSON.parse(rewritten, (_key, value: unknown) => (typeof value === 'string' && value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value)) as unknown;
}

/** `JSON.stringify`, writing bigints as exact integer literals. */
export function stringifyExactJson(value: unknown): string {
  let marked = false;
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'bigint') return v;
    marked = true;
    return `${MARK}${v}`;
  });
  return marked ? text.replace(MARKED, '$1') : text;
}

/**
 * Whether a parsed JSON value nests arrays and objects more than `limit` deep. Walked with a stack of
 * its own, so that any depth is safe to ask about (recursive code, JSON.stringify included, overflows the
 * call stack at a few thousand levels).
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  const stack: Array<{ value: object; depth: number }> = value !== null && typeof value === 'object' ? [{ value, depth: 1 }] : [];
  while (stack.length > 0) {
    const { value: at, depth } = stack.pop()!;
    if (depth > limit) return true;
    for (const child of Array.isArray(at) ? (at as unknown[]) : Object.values(at)) {
      if (child !== null && typeof child === 'object') stack.push({ value: child as object, depth: depth + 1 });
    }
  }
  return false;
}
