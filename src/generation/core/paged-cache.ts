/**
 * The native engine's paged cache, on the host side: which blocks of the addon's pool each row of the
 * running batch holds, handed out as rows grow and taken back when rows end, move or are cancelled.
 * The addon reads the rows' block table (`table()`); rows past the running ones, and a step's padding
 * rows, point at one block kept aside that nothing else holds, so whatever they write lands there.
 *
 * Admission is the scheduler's: it reserves each row's prompt plus output tokens in whole blocks
 * against `tokens`, so that the blocks a running row asks for are always there.
 */
import { ChorusError } from '../../errors.ts';

export class PagedCache {
  /** Row r's blocks, in position order. */
  private rows: number[][] = [];
  private readonly free: number[] = [];
  /** Whether the table changed since `table()` last gave it. */
  changed = true;
  /** The block the rows past the running ones point at. */
  readonly spare: number;

  constructor(
    /** Blocks in the addon's pool. */
    readonly blocks: number,
    readonly blockSize: number,
    /** Rows of the block table (the engine's slots). */
    readonly slots: number,
    /** Blocks a row may hold (its most tokens over blockSize, rounded up). */
    readonly blocksPerRow: number,
  ) {
    if (blocks < 2) throw new ChorusError('CHORUS_DEVICE_MEMORY', `the paged cache needs at least 2 blocks (one is kept aside), got ${blocks}`);
    this.spare = blocks - 1;
    for (let b = blocks - 2; b >= 0; b--) this.free.push(b);
  }

  /** Tokens the cache holds for rows. */
  get tokens(): number {
    return (this.blocks - 1) * this.blockSize;
  }

  /** Blocks no row holds. */
  get freeBlocks(): number {
    return this.free.length;
  }

  /** Row `row`'s blocks (empty for a row that holds none). */
  blocksOf(row: number): readonly number[] {
    return this.rows[row] ?? [];
  }

  /** Makes row `row` (an existing one, or the next) hold blocks for `tokens` tokens. */
  grow(row: number, tokens: number): void {
    if (row > this.rows.length || row >= this.slots) throw new ChorusError('CHORUS_INTERNAL', `paged cache row ${row} after ${this.rows.length} rows of ${this.slots}`);
    const held = (this.rows[row] ??= []);
    const need = Math.ceil(tokens / this.blockSize);
    if (need > this.blocksPerRow) throw new ChorusError('CHORUS_INTERNAL', `a row of ${tokens} tokens needs ${need} blocks; a row holds ${this.blocksPerRow}`);
    while (held.length < need) {
      const block = this.free.pop();
      if (block === undefined) throw new ChorusError('CHORUS_INTERNAL', `the paged cache ran out of blocks (${this.blocks - 1}) that admission had reserved`);
      held.push(block);
      this.changed = true;
    }
  }

  /**
   * Rows j of the next layout continue rows sources[j]: a row continued once takes its blocks along,
   * each further row continuing it gets new blocks with a copy of them, and rows nobody continues give
   * theirs back (first, so that the copies can take them). Returns the copies (whole blocks) to make.
   */
  move(sources: readonly number[]): { from: number[]; to: number[] } {
    const uses = new Map<number, number>();
    for (const source of sources) uses.set(source, (uses.get(source) ?? 0) + 1);
    this.rows.forEach((held, row) => {
      if (!uses.has(row)) this.release(held);
    });
    const from: number[] = [];
    const to: number[] = [];
    const taken = new Set<number>();
    const next = sources.map((source) => {
      const held = this.rows[source] ?? [];
      if (!taken.has(source)) {
        taken.add(source);
        return held;
      }
      return held.map((block) => {
        const copy = this.free.pop();
        if (copy === undefined) throw new ChorusError('CHORUS_INTERNAL', 'the paged cache ran out of blocks copying a beam that admission had reserved');
        from.push(block);
        to.push(copy);
        return copy;
      });
    });
    this.rows = next;
    this.changed = true;
    return { from, to };
  }

  /** Gives every row's blocks back. */
  clear(): void {
    for (const held of this.rows) this.release(held);
    this.rows = [];
    this.changed = true;
  }

  /** The block table the addon reads: slots rows of blocksPerRow ids, unheld entries the spare block. */
  table(): Int32Array {
    this.changed = false;
    const table = new Int32Array(this.slots * this.blocksPerRow).fill(this.spare);
    this.rows.forEach((held, row) => table.set(held, row * this.blocksPerRow));
    return table;
  }

  private release(held: number[]): void {
    for (let i = held.length - 1; i >= 0; i--) this.free.push(held[i]!);
    held.length = 0;
  }
}
