/**
 * The globals a checkpoint's pickle may name, and what each builds. Everything else is refused by the
 * pickle reader with its name. Allowed:
 * - tensors: torch._utils._rebuild_tensor_v2 (and _rebuild_tensor, _rebuild_tensor_v3,
 *   _rebuild_parameter, _rebuild_parameter_with_state), the storage types torch.FloatStorage and
 *   kin, torch.storage.UntypedStorage, torch's dtypes, torch.Size, torch.device;
 * - containers: collections.OrderedDict, set and frozenset, _codecs.encode (how protocol 2 writes bytes);
 * - argparse.Namespace, as a bag of attributes: Megatron-LM saves its command line in every
 *   checkpoint as `args`; a Namespace carries no code, only the attributes the pickle sets;
 * - numpy arrays, scalars and dtypes as opaque values whose contents are never read: Megatron-LM
 *   saves numpy's random state beside the weights.
 */
import { ChorusError } from '../../errors.ts';
import type { FileRanges } from '../file-range.ts';
import { GlobalRef, type Buildable, type KnownGlobal } from './pickle.ts';
import { storageTensor } from './storage-tensor.ts';

/** An element type as torch stores it: the safetensors name and its width in bytes. */
export interface StorageKind {
  readonly dtype: string;
  readonly width: number;
}

/** A storage a tensor views: its bytes (set when the file is read), its element type and count. */
export interface StorageRef {
  readonly key: string;
  readonly kind: StorageKind;
  numel: number;
  bytes: FileRanges | undefined;
  readonly source: string;
}

const KINDS: Record<string, StorageKind> = {
  Float: { dtype: 'F32', width: 4 },
  Half: { dtype: 'F16', width: 2 },
  BFloat16: { dtype: 'BF16', width: 2 },
  Double: { dtype: 'F64', width: 8 },
  Long: { dtype: 'I64', width: 8 },
  Int: { dtype: 'I32', width: 4 },
  Short: { dtype: 'I16', width: 2 },
  Char: { dtype: 'I8', width: 1 },
  Byte: { dtype: 'U8', width: 1 },
  Bool: { dtype: 'BOOL', width: 1 },
  ComplexFloat: { dtype: 'C64', width: 8 },
  ComplexDouble: { dtype: 'C128', width: 16 },
};

/** torch's dtype names, for torch.float32 and kin, and _rebuild_tensor_v3's dtype argument. */
const DTYPES: Record<string, string> = {
  float32: 'Float', float: 'Float', float16: 'Half', half: 'Half', bfloat16: 'BFloat16', float64: 'Double', double: 'Double',
  int64: 'Long', long: 'Long', int32: 'Int', int: 'Int', int16: 'Short', short: 'Short', int8: 'Char', uint8: 'Byte', bool: 'Bool',
  complex64: 'ComplexFloat', complex128: 'ComplexDouble',
};

/** A value kept only so the pickle can go on: a numpy array, scalar or dtype. Its state is dropped. */
export class Opaque implements Buildable {
  constructor(readonly what: string) {}
  setState(): void {}
}

/** argparse.Namespace: its attributes, as the pickle set them. */
export class Namespace implements Buildable {
  readonly attributes = new Map<string, unknown>();
  setState(state: unknown): void {
    if (state instanceof Map) for (const [key, value] of state) this.attributes.set(String(key), value);
  }
}

/** The element kind of the storage type in a persistent id. */
export function storageKind(type: unknown, source: string): StorageKind {
  const name = type instanceof GlobalRef ? type.name : String(type);
  const kind = KINDS[/^torch\.(\w+)Storage$/.exec(name)?.[1] ?? ''];
  if (kind !== undefined) return kind;
  if (name === 'torch.UntypedStorage' || name === 'torch.storage.UntypedStorage') return { dtype: 'U8', width: 1 };
  throw new ChorusError('CHORUS_UNSUPPORTED', `${source}: a storage of type ${name} cannot be read; supported: ${Object.keys(KINDS).map((k) => `torch.${k}Storage`).join(', ')}`);
}

const table = new Map<string, KnownGlobal>();
const allow = (name: string, entry: Omit<KnownGlobal, 'name'>): void => void table.set(name, { name, ...entry });

const rebuild = (args: unknown[], kindOverride?: StorageKind): unknown => {
  const [storage, offset, size, stride] = args;
  if (!isStorageRef(storage) || !Array.isArray(size) || !Array.isArray(stride)) {
    throw new ChorusError('CHORUS_FILE_INVALID', 'a pickled tensor is not (storage, offset, sizes, strides, ...): not a checkpoint torch.save wrote');
  }
  return storageTensor(storage, kindOverride, offset as number, [...(size as number[])], [...(stride as number[])]);
};

function isStorageRef(value: unknown): value is StorageRef {
  return typeof value === 'object' && value !== null && typeof (value as StorageRef).key === 'string' && typeof (value as StorageRef).kind?.width === 'number';
}

/** A REDUCE argument that should be a list or tuple, as an array (empty when it is anything else). */
const items = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
allow('torch._utils._rebuild_tensor', { call: (args) => rebuild(args) });
allow('torch._utils._rebuild_tensor_v2', { call: (args) => rebuild(args) });
allow('torch._utils._rebuild_tensor_v3', {
  call: (args) => {
    const dtype = args[6] instanceof GlobalRef ? args[6].name : String(args[6]);
    return rebuild(args, KINDS[DTYPES[dtype.replace(/^torch\./, '')] ?? ''] ?? { dtype, width: 1 });
  },
});
allow('torch._utils._rebuild_parameter', { call: (args) => args[0] });
allow('torch._utils._rebuild_parameter_with_state', { call: (args) => args[0] });
// Storage types and dtypes are values (a persistent id's type, an args field), never called.
for (const name of Object.keys(KINDS)) allow(`torch.${name}Storage`, {});
for (const name of ['torch.UntypedStorage', 'torch.storage.UntypedStorage']) allow(name, {});
for (const name of Object.keys(DTYPES)) allow(`torch.${name}`, {});
allow('torch.Size', { call: (args) => [...items(args[0])] });
allow('torch.device', { call: (args) => args.map(String).join(':') });
allow('collections.OrderedDict', { call: (args) => new Map(items(args[0]).map((pair) => [items(pair)[0], items(pair)[1]])) });
for (const builtins of ['builtins', '__builtin__']) {
  allow(`${builtins}.set`, { call: (args) => [...items(args[0])] });
  allow(`${builtins}.frozenset`, { call: (args) => Object.freeze([...items(args[0])]) });
  allow(`${builtins}.bytes`, { call: (args) => Uint8Array.from(items(args[0]).map(Number)) });
}
allow('_codecs.encode', { call: (args) => Uint8Array.from(String(args[0]), (c) => c.charCodeAt(0) & 0xff) });
allow('argparse.Namespace', { construct: () => new Namespace(), call: () => new Namespace() });
for (const numpy of ['numpy.core.multiarray', 'numpy._core.multiarray']) {
  allow(`${numpy}._reconstruct`, { call: () => new Opaque('numpy.ndarray') });
  allow(`${numpy}.scalar`, { call: () => new Opaque('numpy scalar') });
}
allow('numpy.ndarray', { construct: () => new Opaque('numpy.ndarray') });
allow('numpy.dtype', { call: () => new Opaque('numpy.dtype'), construct: () => new Opaque('numpy.dtype') });

/** The table's entry for `module.name`, or undefined when the pickle may not name it. */
export function torchGlobal(module: string, name: string): KnownGlobal | undefined {
  return table.get(`${module}.${name}`);
}
