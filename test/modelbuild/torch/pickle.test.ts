import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { ChorusError } from '../../../src/errors.ts';
import { fileRanges } from '../../../src/modelbuild/file-range.ts';
import { unpickle, type PickleContext } from '../../../src/modelbuild/torch/pickle.ts';
import { Namespace, Opaque, torchGlobal } from '../../../src/modelbuild/torch/torch-globals.ts';
import { readWholeEntry, readZipEntries } from '../../../src/modelbuild/torch/zip.ts';
import { pickle, type Py } from '../../helpers/pickle-writer.ts';

const context: PickleContext = {
  source: 'test.pkl',
  global: torchGlobal,
  persistentLoad: () => assert.fail('no persistent ids here'),
};

const read = (value: Py | Uint8Array): unknown => unpickle(value instanceof Uint8Array ? value : pickle(value), context).value;

/** The error reading `bytes` fails with. */
function failure(bytes: Uint8Array): ChorusError {
  try {
    unpickle(bytes, context);
  } catch (error) {
    assert.ok(error instanceof ChorusError);
    return error;
  }
  return assert.fail('the pickle was read');
}

test('unpickle() reads plain values: ints of every width, floats, text, bytes, lists, tuples, dicts', () => {
  const value = read(
    new Map<Py, Py>([
      ['small', 7],
      ['wide', 70_000],
      ['negative', -5],
      ['huge', 2 ** 40],
      ['float', { float: 0.25 }],
      ['text', 'héllo'],
      ['bytes', Uint8Array.of(1, 2, 3)],
      ['nested', [1, { tuple: [null, true, false] }]],
    ]),
  );
  assert.deepEqual(
    value,
    new Map<unknown, unknown>([
      ['small', 7],
      ['wide', 70_000],
      ['negative', -5],
      ['huge', 2 ** 40],
      ['float', 0.25],
      ['text', 'héllo'],
      ['bytes', Uint8Array.of(1, 2, 3)],
      ['nested', [1, [null, true, false]]],
    ]),
  );
});

test('unpickle() reads the memo: a value stored once and fetched twice is the same value', () => {
  // PROTO 2, EMPTY_LIST, BINPUT 0, MARK, BINGET 0, ... : a list holding itself is not needed; a shared list in a tuple is.
  const bytes = Uint8Array.of(0x80, 2, 0x5d, 0x71, 0, 0x4b, 9, 0x61, 0x68, 0, 0x86, 0x2e);
  const [a, b] = read(bytes) as unknown[][];
  assert.deepEqual(a, [9]);
  assert.equal(a, b);
});

test('a global outside the table is refused by its name, before anything could call it', () => {
  for (const [name, bytes] of [
    ['posix.system', pickle({ reduce: [{ global: 'posix.system' }, ['echo ran']] })],
    ['__builtin__.eval', pickle({ reduce: [{ global: '__builtin__.eval' }, ['1 + 1']] })],
    ['torch.nn.modules.linear.Linear', pickle({ newobj: [{ global: 'torch.nn.modules.linear.Linear' }, []] })],
  ] as const) {
    const error = failure(bytes);
    assert.equal(error.code, 'CHORUS_FILE_INVALID');
    assert.equal(error.value, name);
    assert.match(error.message, new RegExp(`test\\.pkl: refused: its pickle names ${name.replace(/\./g, '\\.')}`));
  }
  // STACK_GLOBAL (protocol 4) names the global from two strings on the stack.
  const stacked = Uint8Array.of(0x80, 4, 0x8c, 8, ...Buffer.from('builtins'), 0x8c, 4, ...Buffer.from('exec'), 0x93, 0x2e);
  assert.equal(failure(stacked).value, 'builtins.exec');
});

test('INST and OBJ, which build objects from the stack, are refused as opcodes', () => {
  assert.match(failure(Uint8Array.of(0x80, 2, 0x28, 0x69, ...Buffer.from('os\nsystem\n'), 0x2e)).message, /opcode 0x69 is not read/);
  assert.match(failure(Uint8Array.of(0x80, 2, 0x28, 0x6f, 0x2e)).message, /opcode 0x6f is not read/);
});

test('a pickle cut short fails saying so', () => {
  const whole = pickle(new Map<Py, Py>([['a', 'some text']]));
  assert.match(failure(whole.subarray(0, whole.length - 6)).message, /test\.pkl: not a readable pickle: it ends before its STOP opcode \(truncated\)/);
});

test('REDUCE on a storage type, which the table allows only as a value, is refused', () => {
  assert.match(failure(pickle({ reduce: [{ global: 'torch.FloatStorage' }, []] })).message, /torch\.FloatStorage cannot be called here/);
});

test('argparse.Namespace becomes a bag of its attributes; numpy arrays and an OrderedDict\'s _metadata are kept out of the way', () => {
  const args: Py = { build: [{ newobj: [{ global: 'argparse.Namespace' }, []] }, new Map<Py, Py>([['hidden_size', 32], ['params_dtype', { global: 'torch.float16' }]])] };
  const numpyState: Py = { build: [{ reduce: [{ global: 'numpy.core.multiarray._reconstruct' }, [{ global: 'numpy.ndarray' }, { tuple: [0] }, Uint8Array.of(98)]] }, { tuple: [1, { tuple: [624] }, { reduce: [{ global: 'numpy.dtype' }, ['u4', false, true]] }, false, Uint8Array.of(0, 0)] }] };
  const stateDict: Py = { build: [{ reduce: [{ global: 'collections.OrderedDict' }, []] }, new Map<Py, Py>([['_metadata', new Map<Py, Py>([['', new Map<Py, Py>([['version', 1]])]])]])] };
  const value = read(new Map<Py, Py>([['args', args], ['np_rng_state', { tuple: ['MT19937', numpyState] }], ['model', stateDict]])) as Map<string, unknown>;
  const namespace = value.get('args');
  assert.ok(namespace instanceof Namespace);
  assert.equal(namespace.attributes.get('hidden_size'), 32);
  assert.ok((value.get('np_rng_state') as unknown[])[1] instanceof Opaque);
  assert.deepEqual(value.get('model'), new Map());
});

test('a damaged pickle fails with a ChorusError, never a crash: torch\'s own pickle with bytes changed at random', () => {
  const file = new URL('../../fixtures/checkpoints/megatron/v3/iter_0000100/mp_rank_00/model_optim_rng.pt', import.meta.url).pathname;
  const ranges = fileRanges(file);
  const entries = readZipEntries(ranges, file);
  const original = readWholeEntry(ranges, [...entries.values()].find((e) => e.name.endsWith('/data.pkl'))!, file);
  const torchContext: PickleContext = {
    source: 'damaged.pkl',
    global: torchGlobal,
    persistentLoad: (pid) => ({ key: String((pid as unknown[])[2]), kind: { dtype: 'F32', width: 4 }, numel: 1 << 20, bytes: undefined, source: 'damaged.pkl' }),
  };
  assert.ok(unpickle(original, torchContext).value instanceof Map);
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.nat(original.length - 1), fc.nat(255)), { minLength: 1, maxLength: 4 }), (changes) => {
      const bytes = Uint8Array.from(original);
      for (const [at, value] of changes) bytes[at] = value;
      try {
        unpickle(bytes, torchContext);
      } catch (error) {
        assert.ok(error instanceof ChorusError, `${String(error)} at changes ${JSON.stringify(changes)}`);
      }
    }),
    { seed: 37, numRuns: 400 },
  );
});
