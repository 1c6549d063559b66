/**
 * foldNormsIntoLinear on hand-made node lists: which norms go into the Linear after them, and which
 * stay because something else reads their output or their sum too early.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { foldNormsIntoLinear, foldPostNormsIntoLinear } from '../../src/modelbuild/fold-norms.ts';
import { attribute, float, type NodeProto } from '../../src/modelbuild/graph.ts';

const MS = 'com.microsoft';

function skipNorm(name: string, delta: string, residual: string, gamma: string): NodeProto {
  return { opType: 'SkipSimplifiedLayerNormalization', domain: MS, name, input: [delta, residual, gamma], output: [`${name}.normed`, '', '', `${name}.sum`], attribute: [attribute('epsilon', float(1e-5))] };
}

function linear(name: string, x: string, extra: string[] = []): NodeProto {
  return { opType: 'Linear', domain: 'chorus', name, input: [x, `${name}.weight`, ...extra], output: [`${name}.y`] };
}

function reader(name: string, input: string): NodeProto {
  return { opType: 'Relu', name, input: [input], output: [`${name}.out`] };
}

describe('foldNormsIntoLinear', () => {
  test('folds a residual norm read by one Linear: the delta as x, the residual and weight as inputs 3 and 4, the sum as output 1', () => {
    const nodes = [skipNorm('n', 'delta', 'stream', 'gamma'), linear('q', 'n.normed', ['bias']), reader('next', 'n.sum')];
    const folded = foldNormsIntoLinear(nodes, new Set());
    assert.deepEqual(folded.map((n) => n.opType), ['Linear', 'Relu']);
    assert.deepEqual(folded[0]!.input, ['delta', 'q.weight', 'bias', 'stream', 'gamma']);
    assert.deepEqual(folded[0]!.output, ['q.y', 'n.sum']);
    const epsilon = folded[0]!.attribute!.find((a) => a.name === 'norm_epsilon');
    assert.ok(epsilon !== undefined && Math.abs(epsilon.f! - 1e-5) < 1e-12);
  });

  test('folds a plain norm with no residual, and leaves the sum out where nothing reads it', () => {
    const plain: NodeProto = { opType: 'SimplifiedLayerNormalization', name: 'first', input: ['embed', 'gamma0'], output: ['first.normed'], attribute: [attribute('epsilon', float(1e-6))] };
    const folded = foldNormsIntoLinear([plain, linear('qkv', 'first.normed'), skipNorm('n', 'delta', 'embed', 'gamma1'), linear('gate', 'n.normed')], new Set());
    assert.deepEqual(folded.map((n) => n.opType), ['Linear', 'Linear']);
    assert.deepEqual(folded[0]!.input, ['embed', 'qkv.weight', '', '', 'gamma0']);
    assert.deepEqual(folded[1]!.input, ['delta', 'gate.weight', '', 'embed', 'gamma1']);
    assert.deepEqual(folded[1]!.output, ['gate.y']);
  });

  test('folds into a 4-bit or 8-bit QuantLinear (inputs 6 and 7 the residual and weight), not one with g_idx', () => {
    const quant = (name: string, x: string, bits: number, extra: string[] = []): NodeProto => ({
      opType: 'QuantLinear',
      domain: 'chorus',
      name,
      input: [x, `${name}.B`, `${name}.scales`, ...extra],
      output: [`${name}.y`],
      attribute: [attribute('bits', bits)],
    });
    const folded = foldNormsIntoLinear([skipNorm('n', 'delta', 'stream', 'gamma'), quant('gate', 'n.normed', 4, ['', '', 'bias']), reader('next', 'n.sum')], new Set());
    assert.deepEqual(folded.map((n) => n.opType), ['QuantLinear', 'Relu']);
    assert.deepEqual(folded[0]!.input, ['delta', 'gate.B', 'gate.scales', '', '', 'bias', 'stream', 'gamma']);
    assert.deepEqual(folded[0]!.output, ['gate.y', 'n.sum']);
    const eight = foldNormsIntoLinear([skipNorm('n', 'd', 'r', 'g'), quant('q', 'n.normed', 8)], new Set());
    assert.deepEqual(eight.map((n) => n.opType), ['QuantLinear']);
    assert.deepEqual(eight[0]!.input, ['d', 'q.B', 'q.scales', '', '', '', 'r', 'g']);
    const ordered = [skipNorm('n', 'd', 'r', 'g'), quant('q', 'n.normed', 4, ['zp', 'g_idx'])];
    assert.deepEqual(foldNormsIntoLinear(ordered, new Set()), ordered);
  });

  test('keeps a norm whose output something else reads, that a graph output names, or whose sum is read before the Linear', () => {
    const twoReaders = [skipNorm('n', 'd', 'r', 'g'), linear('q', 'n.normed'), reader('also', 'n.normed')];
    assert.deepEqual(foldNormsIntoLinear(twoReaders, new Set()), twoReaders);
    const output = [skipNorm('n', 'd', 'r', 'g'), linear('q', 'n.normed')];
    assert.deepEqual(foldNormsIntoLinear(output, new Set(['n.normed'])), output);
    const early = [skipNorm('n', 'd', 'r', 'g'), reader('before', 'n.sum'), linear('q', 'n.normed')];
    assert.deepEqual(foldNormsIntoLinear(early, new Set()), early);
    const biased: NodeProto[] = [{ ...skipNorm('n', 'd', 'r', 'g'), input: ['d', 'r', 'g', 'delta_bias'] }, linear('q', 'n.normed')];
    assert.deepEqual(foldNormsIntoLinear(biased, new Set()), biased);
    const notLinear = [skipNorm('n', 'd', 'r', 'g'), { ...linear('q', 'n.normed'), opType: 'MatMul', domain: '' }];
    assert.deepEqual(foldNormsIntoLinear(notLinear, new Set()), notLinear);
    // A head that takes the last position alone folds its norm, but not one whose sum is read.
    const head = { ...linear('head', 'n.normed'), attribute: [attribute('last', 1)] };
    assert.deepEqual(foldNormsIntoLinear([skipNorm('n', 'd', 'r', 'g'), head], new Set()).map((n) => n.opType), ['Linear']);
    const summed = [skipNorm('n', 'd', 'r', 'g'), head, reader('next', 'n.sum')];
    assert.deepEqual(foldNormsIntoLinear(summed, new Set()), summed);
  });

  test("folds into a head that takes last_index (input 6, after inputs 3 to 5 left out), keeping it there", () => {
    const head = { ...linear('head', 'n.normed', ['', '', '', '', 'last_index']), attribute: [attribute('last', 1)] };
    const folded = foldNormsIntoLinear([skipNorm('n', 'd', 'r', 'g'), head], new Set());
    assert.deepEqual(folded.map((n) => n.opType), ['Linear']);
    assert.deepEqual(folded[0]!.input, ['d', 'head.weight', '', 'r', 'g', '', 'last_index']);
    assert.deepEqual(folded[0]!.output, ['head.y']);
    // A Linear with a pre-norm of its own already takes no other.
    const normed = linear('q', 'n.normed', ['', 'stream', 'gamma', '', 'last_index']);
    assert.deepEqual(foldNormsIntoLinear([skipNorm('n', 'd', 'r', 'g'), normed], new Set())[1], normed);
  });
});

describe('foldPostNormsIntoLinear', () => {
  const postNorm = (name: string, x: string): NodeProto => ({
    opType: 'SimplifiedLayerNormalization',
    name,
    input: [x, `${name}.gamma`],
    output: [`${name}.normed`],
    attribute: [attribute('epsilon', float(1e-6))],
  });
  const both = (nodes: NodeProto[], outputs = new Set<string>()): NodeProto[] => foldPostNormsIntoLinear(foldNormsIntoLinear(nodes, outputs), outputs);

  test("folds a sublayer's post-norm into the pre-normed Linear after it: the raw output as x, the norm's weight as input 5", () => {
    const folded = both([postNorm('post', 'attention'), skipNorm('n', 'post.normed', 'stream', 'gamma'), linear('gate', 'n.normed'), reader('next', 'n.sum')]);
    assert.deepEqual(folded.map((n) => n.opType), ['Linear', 'Relu']);
    assert.deepEqual(folded[0]!.input, ['attention', 'gate.weight', '', 'stream', 'gamma', 'post.gamma']);
    assert.deepEqual(folded[0]!.output, ['gate.y', 'n.sum']);
    const epsilon = folded[0]!.attribute!.find((a) => a.name === 'post_norm_epsilon');
    assert.ok(epsilon !== undefined && Math.abs(epsilon.f! - 1e-6) < 1e-12);
  });

  test("keeps a head's last_index after the post-norm it gains", () => {
    const head = { ...linear('head', 'n.normed', ['', '', '', '', 'last_index']), attribute: [attribute('last', 1)] };
    const folded = both([postNorm('post', 'mlp'), skipNorm('n', 'post.normed', 'stream', 'gamma'), head]);
    assert.deepEqual(folded.map((n) => n.opType), ['Linear']);
    assert.deepEqual(folded[0]!.input, ['mlp', 'head.weight', '', 'stream', 'gamma', 'post.gamma', 'last_index']);
  });

  test('takes the post-normed operand from the residual side too, trading x and the residual', () => {
    const folded = both([postNorm('post', 'mlp'), skipNorm('n', 'stream', 'post.normed', 'gamma'), linear('qkv', 'n.normed', ['bias'])]);
    assert.deepEqual(folded.map((n) => n.opType), ['Linear']);
    assert.deepEqual(folded[0]!.input, ['mlp', 'qkv.weight', 'bias', 'stream', 'gamma', 'post.gamma']);
  });

  test('keeps a post-norm something else reads, a graph output, or one before a Linear without a pre-norm', () => {
    const twoReaders = [postNorm('post', 'a'), skipNorm('n', 'post.normed', 'stream', 'gamma'), linear('gate', 'n.normed'), reader('also', 'post.normed')];
    assert.deepEqual(
      both(twoReaders).map((n) => n.opType),
      ['SimplifiedLayerNormalization', 'Linear', 'Relu'],
    );
    const output = [postNorm('post', 'a'), skipNorm('n', 'post.normed', 'stream', 'gamma'), linear('gate', 'n.normed')];
    assert.deepEqual(
      both(output, new Set(['post.normed'])).map((n) => n.opType),
      ['SimplifiedLayerNormalization', 'Linear'],
    );
    const otherAxis = [{ ...postNorm('post', 'a'), attribute: [attribute('axis', 1)] }, skipNorm('n', 'post.normed', 'stream', 'gamma'), linear('gate', 'n.normed')];
    assert.deepEqual(
      both(otherAxis).map((n) => n.opType),
      ['SimplifiedLayerNormalization', 'Linear'],
    );
    const plainLinear = [postNorm('post', 'a'), linear('gate', 'post.normed')];
    // The post-norm is then an ordinary pre-norm of that Linear.
    assert.deepEqual(both(plainLinear)[0]!.input, ['a', 'gate.weight', '', '', 'post.gamma']);
    const quant: NodeProto = { opType: 'QuantLinear', domain: 'chorus', name: 'q', input: ['n.normed', 'q.B', 'q.scales'], output: ['q.y'], attribute: [attribute('bits', 4)] };
    assert.deepEqual(
      both([postNorm('post', 'a'), skipNorm('n', 'post.normed', 'stream', 'gamma'), quant]).map((n) => n.opType),
      ['SimplifiedLayerNormalization', 'QuantLinear'],
    );
  });
});
