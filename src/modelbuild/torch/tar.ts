/**
 * Tar archives (ustar, with pax and GNU long names), as NeMo packs a `.nemo` model: the entries'
 * headers are read when the archive is opened, each entry's bytes by position when asked for. A
 * gzip-compressed archive (older NeMo) is inflated in memory first, up to GZIP_LIMIT bytes.
 */
import { gunzipSync } from 'node:zlib';
import { ChorusError } from '../../errors.ts';
import type { FileRanges } from '../file-range.ts';
import { sliceRanges } from './zip.ts';

/** The largest gzip-compressed archive inflated in memory; past it, unpack the archive and build the directory. */
export const GZIP_LIMIT = 2 * 1024 ** 3;

/** The regular files of the archive in `ranges`, by name (a leading `./` dropped), as byte ranges. */
export function readTarEntries(ranges: FileRanges, source: string): Map<string, FileRanges> {
  const head = ranges.read(0, Math.min(2, ranges.size));
  if (head[0] === 0x1f && head[1] === 0x8b) return readTarEntries(inflated(ranges, source), source);
  const entries = new Map<string, FileRanges>();
  let at = 0;
  let longName: string | undefined;
  while (at + 512 <= ranges.size) {
    const header = Buffer.from(ranges.read(at, 512));
    if (header.every((b) => b === 0)) return entries;
    const size = octal(header, 124, 12, source);
    const type = String.fromCharCode(header[156]!);
    const dataAt = at + 512;
    if (dataAt + size > ranges.size) throw invalid(source, `entry ${field(header, 0, 100)} lies past the end of the archive: the file is truncated`);
    const data = (): Buffer => Buffer.from(ranges.read(dataAt, size));
    if (type === 'L') longName = data().toString('utf8').replace(/\0+$/, '');
    else if (type === 'x') longName = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(data().toString('utf8'))?.[1] ?? longName;
    else {
      const prefix = field(header, 345, 155);
      const name = longName ?? (prefix ? `${prefix}/${field(header, 0, 100)}` : field(header, 0, 100));
      longName = undefined;
      if (type === '0' || type === '\0') entries.set(name.replace(/^(\.\/)+/, ''), sliceRanges(ranges, dataAt, size));
    }
    at = dataAt + Math.ceil(size / 512) * 512;
  }
  if (entries.size === 0) throw invalid(source, 'no entries: not a tar archive');
  return entries;
}

function inflated(ranges: FileRanges, source: string): FileRanges {
  if (ranges.size > GZIP_LIMIT) {
    throw new ChorusError('CHORUS_UNSUPPORTED', `${source} is a gzip-compressed archive of ${ranges.size} bytes; unpack it (tar -xzf) and build the directory it gives`);
  }
  let bytes: Buffer;
  try {
    bytes = gunzipSync(ranges.read(0, ranges.size), { maxOutputLength: GZIP_LIMIT });
  } catch (cause) {
    throw new ChorusError('CHORUS_FILE_INVALID', `${source} is a damaged or truncated gzip archive (${(cause as Error).message}), or unpacks to more than ${GZIP_LIMIT} bytes: unpack it (tar -xzf) and build the directory`, { cause });
  }
  return {
    size: bytes.length,
    read: (position, length) => bytes.subarray(position, position + length),
  };
}

function field(header: Buffer, start: number, length: number): string {
  const raw = header.subarray(start, start + length);
  const end = raw.indexOf(0);
  return raw.toString('utf8', 0, end < 0 ? length : end);
}

function octal(header: Buffer, start: number, length: number, source: string): number {
  if ((header[start]! & 0x80) !== 0) {
    let value = 0;
    for (let i = start + 1; i < start + length; i++) value = value * 256 + header[i]!;
    return value;
  }
  const text = field(header, start, length).trim();
  if (!/^[0-7]*$/.test(text)) throw invalid(source, `a header's size field ${JSON.stringify(text)} is not octal: the archive is damaged`);
  return text === '' ? 0 : Number.parseInt(text, 8);
}

function invalid(source: string, detail: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${source} is not a readable .nemo archive: ${detail}`);
}
