/**
 * Files written by torch.save: the zip archive of PyTorch 1.6 and later (`<name>/data.pkl` plus one
 * entry per storage, `<name>/data/<key>`) and the older format (a run of pickles followed by the raw
 * storages). The pickle is read by the restricted reader (pickle.ts) with the globals in torch-globals.ts;
 * tensors come back lazy, reading their storage's bytes by position when their values are asked for.
 */
import { ChorusError } from '../../errors.ts';
import type { FileRanges } from '../file-range.ts';
import { PICKLE_ENDS_EARLY, unpickle } from './pickle.ts';
import { storageKind, torchGlobal, type StorageRef } from './torch-globals.ts';
import { entryRanges, readWholeEntry, readZipEntries, sliceRanges } from './zip.ts';

/** The legacy format's first pickle: torch's magic number. */
const LEGACY_MAGIC = 0x1950a86a20f9469cfc6cn;

/**
 * True when `head` (a file's first 4 bytes) starts as torch.save writes: a zip archive ("PK\x03\x04"),
 * or the older format's first pickle (PROTO 2, then its 10-byte magic number as LONG1).
 */
export function isTorchFileStart(head: Uint8Array): boolean {
  const zip = head[0] === 0x50 && head[1] === 0x4b && head[2] === 0x03 && head[3] === 0x04;
  return zip || (head[0] === 0x80 && head[1] === 0x02 && head[2] === 0x8a && head[3] === 0x0a);
}

/** Reads the object a torch.save file holds; its tensors are lazy. */
export function readTorchFile(ranges: FileRanges, source: string): unknown {
  if (ranges.size < 4) throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: it has ${ranges.size} bytes`);
  const head = ranges.read(0, 4);
  if (head[0] === 0x50 && head[1] === 0x4b) return readZipFile(ranges, source);
  if (isTorchFileStart(head)) return readLegacyFile(ranges, source);
  throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: it is neither a zip archive (torch.save since PyTorch 1.6) nor a pickle (older torch.save)`);
}

function readZipFile(ranges: FileRanges, source: string): unknown {
  const entries = readZipEntries(ranges, source);
  const pickleName = [...entries.keys()].find((name) => name === 'data.pkl' || /^[^/]+\/data\.pkl$/.test(name));
  if (pickleName === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${source} is a zip archive without data.pkl: not a file torch.save wrote`);
  const prefix = pickleName.slice(0, -'data.pkl'.length);
  const byteorder = entries.get(`${prefix}byteorder`);
  if (byteorder !== undefined) {
    const order = Buffer.from(readWholeEntry(ranges, byteorder, source)).toString('latin1');
    if (order !== 'little') throw new ChorusError('CHORUS_UNSUPPORTED', `${source} was saved on a ${order}-endian machine; only little-endian checkpoints are read`);
  }
  const storages = new Map<string, FileRanges>();
  const pickle = readWholeEntry(ranges, entries.get(pickleName)!, source);
  return unpickle(pickle, {
    source,
    global: torchGlobal,
    persistentLoad(pid) {
      const { key, kind, numel } = persistentStorage(pid, source);
      let bytes = storages.get(key);
      if (bytes === undefined) {
        const entry = entries.get(`${prefix}data/${key}`);
        if (entry === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: storage ${key} has no entry ${prefix}data/${key} (truncated or damaged)`);
        if (entry.size < numel * kind.width) throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: storage ${key} holds ${entry.size} bytes, its tensors need ${numel * kind.width}`);
        bytes = entryRanges(ranges, entry, source);
        storages.set(key, bytes);
      }
      return { key, kind, numel, bytes, source } satisfies StorageRef;
    },
  }).value;
}

/**
 * The pre-1.6 format: pickles of the magic number, the protocol version and the system's facts, the
 * object itself (storages as persistent ids), then the list of storage keys; then each storage in that
 * order as an 8-byte element count and its raw bytes.
 */
function readLegacyFile(ranges: FileRanges, source: string): unknown {
  const found = new Map<string, StorageRef>();
  const context = {
    source,
    global: torchGlobal,
    persistentLoad(pid: unknown): StorageRef {
      const { key, kind, numel, view } = persistentStorage(pid, source);
      if (view) throw new ChorusError('CHORUS_UNSUPPORTED', `${source} holds a storage view, which only PyTorch before 1.0 wrote; load it with torch and save it again`);
      let ref = found.get(key);
      if (ref === undefined) {
        ref = { key, kind, numel, bytes: undefined, source };
        found.set(key, ref);
      }
      return ref;
    },
  };
  // The pickles before the storages are small: read a window, and a larger one if a pickle runs past it.
  const pickled = (start: number): { value: unknown; end: number } => {
    for (let window = 1 << 20; ; window *= 8) {
      const length = Math.min(ranges.size - start, window);
      try {
        const { value, end } = unpickle(ranges.read(start, length), context);
        return { value, end: start + end };
      } catch (error) {
        if (!(error instanceof ChorusError && error.param === PICKLE_ENDS_EARLY && length < ranges.size - start)) throw error;
      }
    }
  };
  const magic = pickled(0);
  if (magic.value !== LEGACY_MAGIC) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: a pickle, but not one torch.save wrote (no magic number)`);
  }
  const protocol = pickled(magic.end);
  const facts = pickled(protocol.end);
  if (facts.value instanceof Map && facts.value.get('little_endian') === false) throw new ChorusError('CHORUS_UNSUPPORTED', `${source} was saved on a big-endian machine; only little-endian checkpoints are read`);
  const main = pickled(facts.end);
  const keys = pickled(main.end);
  if (!Array.isArray(keys.value)) throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: its storage list is missing`);
  let at = keys.end;
  for (const key of keys.value as unknown[]) {
    const ref = found.get(String(key));
    if (ref === undefined) throw new ChorusError('CHORUS_FILE_INVALID', `${source}: storage ${String(key)} is listed but no tensor uses it`);
    if (at + 8 > ranges.size) throw truncatedStorage(source, ref.key);
    const numel = Number(Buffer.from(ranges.read(at, 8)).readBigInt64LE(0));
    const length = numel * ref.kind.width;
    if (at + 8 + length > ranges.size) throw truncatedStorage(source, ref.key);
    ref.bytes = sliceRanges(ranges, at + 8, length);
    ref.numel = numel;
    at += 8 + length;
  }
  for (const ref of found.values()) if (ref.bytes === undefined) throw truncatedStorage(source, ref.key);
  return main.value;
}

/** A storage's persistent id: ('storage', type, key, location, numel[, view metadata]). */
function persistentStorage(pid: unknown, source: string): { key: string; kind: ReturnType<typeof storageKind>; numel: number; view: boolean } {
  if (!Array.isArray(pid) || pid[0] !== 'storage' || pid.length < 5) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: a persistent id that is not a storage`);
  }
  const [, type, key, , numel, view] = pid as unknown[];
  const kind = storageKind(type, source);
  return { key: String(key), kind, numel: Number(numel), view: view !== undefined && view !== null };
}

function truncatedStorage(source: string, key: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${source} is truncated: storage ${key} ends past the end of the file; download it again`);
}
