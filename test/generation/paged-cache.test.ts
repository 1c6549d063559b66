import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PagedCache } from '../../src/generation/core/paged-cache.ts';

describe('PagedCache', () => {
  test('rows take blocks as they grow, and give them back when they leave', () => {
    const cache = new PagedCache(9, 4, 3, 4);
    assert.equal(cache.tokens, 32);
    cache.grow(0, 5);
    cache.grow(1, 4);
    assert.deepEqual([cache.blocksOf(0).length, cache.blocksOf(1).length], [2, 1]);
    cache.grow(1, 5);
    assert.equal(cache.blocksOf(1).length, 2);
    assert.equal(cache.freeBlocks, 8 - 4);
    // Row 0 leaves: row 1 moves down with its blocks, no copies.
    const held = [...cache.blocksOf(1)];
    assert.deepEqual(cache.move([1]), { from: [], to: [] });
    assert.deepEqual(cache.blocksOf(0), held);
    assert.equal(cache.freeBlocks, 8 - 2);
    cache.clear();
    assert.equal(cache.freeBlocks, 8);
  });

  test('a row continued twice gets a copy of its blocks', () => {
    const cache = new PagedCache(9, 4, 3, 4);
    cache.grow(0, 6);
    const source = [...cache.blocksOf(0)];
    const { from, to } = cache.move([0, 0, 0]);
    assert.deepEqual(from, [...source, ...source]);
    assert.equal(new Set([...source, ...to]).size, 6);
    assert.deepEqual(cache.blocksOf(0), source);
    assert.deepEqual([...cache.blocksOf(1), ...cache.blocksOf(2)], to);
    // Beams that stop being continued give their blocks back before the copies take new ones.
    cache.move([2, 2, 1]);
    assert.equal(cache.freeBlocks, 8 - 6);
  });

  test('the table names each row\'s blocks and points the rest at the spare block', () => {
    const cache = new PagedCache(5, 2, 2, 3);
    cache.grow(0, 3);
    assert.deepEqual(Array.from(cache.table()), [...cache.blocksOf(0), 4, 4, 4, 4]);
    assert.equal(cache.changed, false);
    cache.grow(0, 3);
    assert.equal(cache.changed, false);
    cache.grow(1, 1);
    assert.equal(cache.changed, true);
  });

  test('running out of blocks or past a row\'s blocks is an internal error (admission reserves them)', () => {
    const cache = new PagedCache(3, 2, 2, 4);
    assert.throws(() => cache.grow(0, 6), { code: 'CHORUS_INTERNAL' });
    assert.throws(() => cache.grow(1, 10), { code: 'CHORUS_INTERNAL' });
    assert.throws(() => new PagedCache(1, 2, 2, 4), { code: 'CHORUS_DEVICE_MEMORY' });
  });
});
