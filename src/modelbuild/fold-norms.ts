/**
 * The slot decoders' RMSNorms folded into the Linear that reads them: a decode step's norm is a kernel
 * of its own, about 2 us plus a gap before the next, twice a layer; the addon's Linear takes the
 * residual sum and the norm in the kernel that reads its weights (see src/native/linear.h), as the
 * addon's QuantLinear does for float16 decode steps of 4-bit and 8-bit weights (src/native/quant-linear.h;
 * elsewhere it runs the norm in a pass of its own first).
 */
import { attribute, float, type NodeProto } from './graph.ts';
import { MS } from './layers.ts';

/** A node's float attribute, or undefined. */
function floatAttribute(node: NodeProto, name: string): number | undefined {
  return node.attribute?.find((a) => a.name === name)?.f ?? undefined;
}

/** A node's int attribute, or undefined. */
function intAttribute(node: NodeProto, name: string): number | undefined {
  const value = node.attribute?.find((a) => a.name === name)?.i;
  return value === undefined || value === null ? undefined : Number(value);
}

/** The nodes that read each value, by index (a node once for each input that names it). */
function readersOf(nodes: readonly NodeProto[]): Map<string, number[]> {
  const readers = new Map<string, number[]>();
  nodes.forEach((node, index) => {
    for (const input of node.input ?? []) {
      if (input === '') continue;
      const list = readers.get(input) ?? [];
      list.push(index);
      readers.set(input, list);
    }
  });
  return readers;
}

/**
 * Which of the addon's operators `node` is, where a norm folds into it: a Linear without a pre-norm (its
 * inputs 3 to 5 left out; a last_index after them stays), or a QuantLinear without one (nor g_idx).
 */
function foldsInto(node: NodeProto): 'Linear' | 'QuantLinear' | undefined {
  if (node.domain !== 'chorus') return undefined;
  const inputs = node.input ?? [];
  if (node.opType === 'Linear' && inputs.slice(3, 6).every((input) => input === '')) return 'Linear';
  const bits = node.attribute?.find((a) => a.name === 'bits')?.i;
  if (node.opType === 'QuantLinear' && inputs.length <= 6 && (inputs[4] ?? '') === '' && (Number(bits) === 4 || Number(bits) === 8)) return 'QuantLinear';
  return undefined;
}

/**
 * Folds each SkipSimplifiedLayerNormalization (no bias) and SimplifiedLayerNormalization whose normed
 * output only one chorus Linear (or QuantLinear) reads, as its x, into that operator: its inputs
 * gain the residual and the norm's weight, its outputs the residual sum where anything reads it. A norm read by anything else (a
 * Slice before the head, a MatMul, a graph output) stays as it is, as does one whose sum is read before
 * the Linear.
 */
export function foldNormsIntoLinear(nodes: readonly NodeProto[], outputs: ReadonlySet<string>): NodeProto[] {
  const readers = readersOf(nodes);
  const dropped = new Set<number>();
  const replaced = new Map<number, NodeProto>();
  nodes.forEach((node, index) => {
    const skip = node.opType === 'SkipSimplifiedLayerNormalization' && node.domain === MS && node.input?.length === 3;
    const plain = node.opType === 'SimplifiedLayerNormalization' && (node.domain ?? '') === '' && node.input?.length === 2;
    if (!skip && !plain) return;
    const normed = node.output![0]!;
    const consumers = readers.get(normed) ?? [];
    if (consumers.length !== 1 || outputs.has(normed)) return;
    const at = consumers[0]!;
    const linear = nodes[at]!;
    const kind = foldsInto(linear);
    if (kind === undefined || linear.input![0] !== normed || replaced.has(at)) return;
    // Only the sum may be read (not the mean or the inverse deviation), and only after the Linear.
    const sum = skip ? node.output![3] : undefined;
    for (const other of [node.output![1], node.output![2]]) {
      if (other !== undefined && other !== '' && (readers.has(other) || outputs.has(other))) return;
    }
    const sumRead = sum !== undefined && sum !== '' && (readers.has(sum) || outputs.has(sum));
    if (sumRead && (readers.get(sum!) ?? []).some((reader) => reader < at)) return;
    // A Linear that takes the last position alone has no sum to hand on.
    if (sumRead && intAttribute(linear, 'last') === 1) return;
    const epsilon = floatAttribute(node, 'epsilon') ?? 1e-5;
    // Linear: x, weight, bias, residual, norm (then post_norm and last_index, kept where given);
    // QuantLinear: A, B, scales, zero_points, g_idx, bias, residual, norm.
    const own = linear.input!.slice(1, kind === 'Linear' ? 3 : 6);
    while (own.length < (kind === 'Linear' ? 2 : 5)) own.push('');
    const after = kind === 'Linear' ? linear.input!.slice(5) : [];
    replaced.set(at, {
      ...linear,
      input: [node.input![0]!, ...own, skip ? node.input![1]! : '', skip ? node.input![2]! : node.input![1]!, ...after],
      output: sumRead ? [linear.output![0]!, sum!] : [linear.output![0]!],
      attribute: [...(linear.attribute ?? []), attribute('norm_epsilon', float(epsilon))],
    });
    dropped.add(index);
  });
  return nodes.flatMap((node, index) => (dropped.has(index) ? [] : [replaced.get(index) ?? node]));
}

/**
 * Folds each SimplifiedLayerNormalization whose output only a pre-normed chorus Linear reads, as its x
 * or its residual, into that Linear as its post-norm (input 5): Gemma 2's post-attention and
 * post-feedforward norms, each of a sublayer's output before it joins the residual stream, which the
 * next pre-norm is taken of. The Linear then takes the sublayer's raw output as x (x and the residual
 * trade places where the residual was the normed one: their sum is the same). Run after
 * foldNormsIntoLinear; a QuantLinear keeps its post-norm apart.
 */
export function foldPostNormsIntoLinear(nodes: readonly NodeProto[], outputs: ReadonlySet<string>): NodeProto[] {
  const readers = readersOf(nodes);
  const producers = new Map<string, number>();
  nodes.forEach((node, index) => {
    for (const output of node.output ?? []) if (output !== '') producers.set(output, index);
  });
  const dropped = new Set<number>();
  const replaced = new Map<number, NodeProto>();
  nodes.forEach((node, index) => {
    const inputs = node.input ?? [];
    if (node.domain !== 'chorus' || node.opType !== 'Linear' || (inputs[4] ?? '') === '' || (inputs[5] ?? '') !== '') return;
    // The operand a post-norm wrote: x (input 0) or the residual (input 3).
    for (const operand of [0, 3]) {
      const name = inputs[operand] ?? '';
      const at = name === '' ? undefined : producers.get(name);
      if (at === undefined || dropped.has(at)) continue;
      const norm = nodes[at]!;
      const axis = intAttribute(norm, 'axis');
      const plain = norm.opType === 'SimplifiedLayerNormalization' && (norm.domain ?? '') === '' && norm.input?.length === 2 && (axis === undefined || axis === -1);
      if (!plain || readers.get(name)?.length !== 1 || outputs.has(name)) continue;
      if ((norm.output ?? []).slice(1).some((other) => other !== '' && (readers.has(other) || outputs.has(other)))) continue;
      const other = inputs[operand === 0 ? 3 : 0] ?? '';
      // A last_index (input 6) stays after the post-norm.
      const folded = [norm.input![0]!, inputs[1]!, inputs[2] ?? '', other, inputs[4]!, norm.input![1]!, ...inputs.slice(6)];
      replaced.set(index, { ...node, input: folded, attribute: [...(node.attribute ?? []), attribute('post_norm_epsilon', float(floatAttribute(norm, 'epsilon') ?? 1e-5))] });
      dropped.add(at);
      return;
    }
  });
  return nodes.flatMap((node, index) => (dropped.has(index) ? [] : [replaced.get(index) ?? node]));
}
