/**
 * The zip archives torch.save writes (since PyTorch 1.6): entries stored uncompressed, 64-byte
 * aligned, ZIP64 past 4 GiB. Only the central directory and local headers are read when the archive is
 * opened; an entry's bytes are read by position when asked for. Compressed entries are read only where
 * they are small (the pickle itself, if an archive was re-zipped); a compressed tensor is refused.
 */
import { crc32, inflateRawSync } from 'node:zlib';
import { ChorusError } from '../../errors.ts';
import type { FileRanges } from '../file-range.ts';

/** One entry: where its bytes start in the archive, how many there are, and how they are stored. */
export interface ZipEntry {
  readonly name: string;
  readonly offset: number;
  readonly size: number;
  readonly compressedSize: number;
  readonly method: number;
  readonly crc: number;
}

const EOCD = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EOCD = 0x06064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;

/** The entries of the archive in `ranges`, by name. */
export function readZipEntries(ranges: FileRanges, source: string): Map<string, ZipEntry> {
  const tailLength = Math.min(ranges.size, 22 + 0xffff);
  const tail = Buffer.from(ranges.read(ranges.size - tailLength, tailLength));
  let eocd = -1;
  for (let i = tail.length - 22; i >= 0; i--) {
    if (tail.readUInt32LE(i) === EOCD) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw invalid(source, 'no end-of-central-directory record: the file is truncated, or not a zip archive written by torch.save');
  let count = tail.readUInt16LE(eocd + 10);
  let directorySize = tail.readUInt32LE(eocd + 12);
  let directoryOffset = tail.readUInt32LE(eocd + 16);
  const eocdPosition = ranges.size - tailLength + eocd;
  if (count === 0xffff || directorySize === 0xffffffff || directoryOffset === 0xffffffff) {
    const locatorAt = eocdPosition - 20;
    const locator = locatorAt >= 0 ? Buffer.from(ranges.read(locatorAt, 20)) : undefined;
    if (locator === undefined || locator.readUInt32LE(0) !== ZIP64_LOCATOR) throw invalid(source, 'its ZIP64 end-of-central-directory locator is missing');
    const recordAt = safe(locator.readBigUInt64LE(8), source);
    if (recordAt + 56 > ranges.size) throw invalid(source, 'its ZIP64 end-of-central-directory record lies past the end of the file (truncated)');
    const record = Buffer.from(ranges.read(recordAt, 56));
    if (record.readUInt32LE(0) !== ZIP64_EOCD) throw invalid(source, 'its ZIP64 end-of-central-directory record is missing');
    count = safe(record.readBigUInt64LE(32), source);
    directorySize = safe(record.readBigUInt64LE(40), source);
    directoryOffset = safe(record.readBigUInt64LE(48), source);
  }
  if (directoryOffset + directorySize > ranges.size) throw invalid(source, `its central directory (${directorySize} bytes at ${directoryOffset}) lies past the end of the ${ranges.size}-byte file: the file is truncated`);
  const directory = Buffer.from(ranges.read(directoryOffset, directorySize));
  const entries = new Map<string, ZipEntry>();
  let at = 0;
  for (let n = 0; n < count; n++) {
    if (at + 46 > directory.length || directory.readUInt32LE(at) !== CENTRAL) throw invalid(source, `central directory entry ${n} of ${count} is damaged`);
    const method = directory.readUInt16LE(at + 10);
    const crc = directory.readUInt32LE(at + 16);
    let compressedSize = directory.readUInt32LE(at + 20);
    let size = directory.readUInt32LE(at + 24);
    const nameLength = directory.readUInt16LE(at + 28);
    const extraLength = directory.readUInt16LE(at + 30);
    const commentLength = directory.readUInt16LE(at + 32);
    let localOffset = directory.readUInt32LE(at + 42);
    const name = directory.toString('utf8', at + 46, at + 46 + nameLength);
    const extra = directory.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength);
    for (let e = 0; e + 4 <= extra.length; e += 4 + extra.readUInt16LE(e + 2)) {
      if (extra.readUInt16LE(e) !== 0x0001) continue;
      let field = e + 4;
      const next = (): number => {
        const value = safe(extra.readBigUInt64LE(field), source);
        field += 8;
        return value;
      };
      if (size === 0xffffffff) size = next();
      if (compressedSize === 0xffffffff) compressedSize = next();
      if (localOffset === 0xffffffff) localOffset = next();
    }
    at += 46 + nameLength + extraLength + commentLength;
    if (localOffset + 30 > directoryOffset) throw truncatedEntry(source, name);
    const local = Buffer.from(ranges.read(localOffset, 30));
    if (local.readUInt32LE(0) !== LOCAL) throw invalid(source, `the local header of ${name} is damaged`);
    const offset = localOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
    if (offset + compressedSize > directoryOffset) throw truncatedEntry(source, name);
    entries.set(name, { name, offset, size, compressedSize, method, crc });
  }
  return entries;
}

/** The whole of a small entry, checked against its CRC-32 (stored or deflated). */
export function readWholeEntry(ranges: FileRanges, entry: ZipEntry, source: string): Uint8Array {
  const raw = ranges.read(entry.offset, entry.compressedSize);
  let bytes: Uint8Array;
  if (entry.method === 0) bytes = raw;
  else if (entry.method === 8) bytes = inflateRawSync(raw);
  else throw invalid(source, `${entry.name} is compressed with method ${entry.method}; torch.save stores entries uncompressed`);
  if (crc32(bytes) !== entry.crc) throw invalid(source, `${entry.name} fails its CRC-32 check: the file is damaged`);
  return bytes;
}

/** Positioned reads of a stored entry's bytes. */
export function entryRanges(ranges: FileRanges, entry: ZipEntry, source: string): FileRanges {
  if (entry.method !== 0) throw invalid(source, `${entry.name} is compressed (method ${entry.method}); tensors are read from entries stored uncompressed, as torch.save writes them: save the checkpoint again with torch.save`);
  return sliceRanges(ranges, entry.offset, entry.size);
}

/** The byte range [offset, offset + size) of `ranges` as a source of its own. */
export function sliceRanges(ranges: FileRanges, offset: number, size: number): FileRanges {
  return {
    size,
    read(position, length) {
      if (position < 0 || position + length > size) throw new ChorusError('CHORUS_INTERNAL', `a read of ${length} bytes at ${position} passes the end of a ${size}-byte range`);
      return ranges.read(offset + position, length);
    },
  };
}

function safe(value: bigint, source: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw invalid(source, `an offset of ${value} bytes`);
  return Number(value);
}

function truncatedEntry(source: string, name: string): ChorusError {
  return invalid(source, `${name} runs into the central directory that follows the entries: the file is truncated or damaged; download it again`);
}

function invalid(source: string, detail: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable PyTorch checkpoint: ${detail}`);
}
