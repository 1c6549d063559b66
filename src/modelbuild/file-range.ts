/** Positioned reads of byte ranges of a file that must not change while a build reads it. */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { ChorusError } from '../errors.ts';

/** The largest single read: positioned reads take less than 2 GiB at once. */
const MAX_READ = 1 << 30;

/** A file's size and modification time when it was opened, and a reader of its byte ranges. */
export interface FileRanges {
  size: number;
  /** `length` bytes at `position`; fails if the file changed since it was opened, or ends first. */
  read(position: number, length: number): Uint8Array;
}

/** Opens `file` for positioned reads (each read opens and closes it: nothing is held between them). */
export function fileRanges(file: string): FileRanges {
  const fd = openSync(file, 'r');
  let seen: { size: number; mtimeMs: number };
  try {
    seen = fstatSync(fd);
  } finally {
    closeSync(fd);
  }
  return {
    size: seen.size,
    read(position, length) {
      const fd = openSync(file, 'r');
      try {
        const { size, mtimeMs } = fstatSync(fd);
        if (size !== seen.size || mtimeMs !== seen.mtimeMs) {
          throw new ChorusError('CHORUS_FILE_INVALID', `${file} changed while it was being read (${seen.size} bytes when opened, ${size} now); build again from a checkpoint that is not being written`);
        }
        return readExactly(fd, file, position, length);
      } finally {
        closeSync(fd);
      }
    },
  };
}

/** Exactly `length` bytes at `position` of an open file. */
export function readExactly(fd: number, file: string, position: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, Math.min(MAX_READ, length - done), position + done);
    if (n === 0) throw truncated(file, position + length, position + done, 'a tensor');
    done += n;
  }
  return out;
}

/** The error for a file shorter than its own header says. */
export function truncated(file: string, expected: number, found: number, what: string): ChorusError {
  return new ChorusError('CHORUS_FILE_INVALID', `${file} is truncated: ${what} needs ${expected} bytes, the file has ${found}; download it again`);
}
