/**
 * Hand-made pickles and torch-style zip archives for the reader's unit tests: opcodes written one by
 * one, so a test can say exactly what a pickle holds (a forbidden global, an odd opcode, a strided
 * tensor). The evidence that real torch.save files are read is the fixtures torch wrote
 * (test/fixtures/checkpoints); these cover the cases torch would not write on purpose.
 */
import { writeFileSync } from 'node:fs';
import { crc32 } from 'node:zlib';

/** A value to pickle: plain JS values, or one of the tagged forms below. */
export type Py =
  | null
  | boolean
  | number
  | string
  | Uint8Array
  | Py[]
  | Map<Py, Py>
  | { float: number }
  | { tuple: Py[] }
  | { global: string }
  | { reduce: [Py, Py[]] }
  | { newobj: [Py, Py[]] }
  | { build: [Py, Py] }
  | { persid: Py };

/** The protocol-2 pickle of `value`. */
export function pickle(value: Py): Uint8Array {
  const out: number[] = [0x80, 2];
  const u32 = (n: number): void => void out.push(n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff);
  const text = (s: string): void => {
    const bytes = Buffer.from(s, 'utf8');
    out.push(0x58);
    u32(bytes.length);
    out.push(...bytes);
  };
  const write = (v: Py): void => {
    if (v === null) out.push(0x4e);
    else if (v === true) out.push(0x88);
    else if (v === false) out.push(0x89);
    else if (typeof v === 'number') {
      if (v >= 0 && v < 256) out.push(0x4b, v);
      else if (v >= -(2 ** 31) && v < 2 ** 31) {
        out.push(0x4a);
        u32(v);
      }
      else {
        let n = BigInt(v);
        const bytes: number[] = [];
        do {
          bytes.push(Number(n & 0xffn));
          n >>= 8n;
        } while (n !== 0n && n !== -1n);
        if ((bytes[bytes.length - 1]! & 0x80) !== (v < 0 ? 0x80 : 0)) bytes.push(v < 0 ? 0xff : 0);
        out.push(0x8a, bytes.length, ...bytes);
      }
    } else if (typeof v === 'string') text(v);
    else if (v instanceof Uint8Array) {
      out.push(0x42);
      u32(v.length);
      out.push(...v);
    }
    else if (Array.isArray(v)) {
      out.push(0x5d, 0x28);
      v.forEach(write);
      out.push(0x65);
    } else if (v instanceof Map) {
      out.push(0x7d, 0x28);
      for (const [key, item] of v) {
        write(key);
        write(item);
      }
      out.push(0x75);
    } else if ('float' in v) {
      const b = Buffer.alloc(8);
      b.writeDoubleBE(v.float);
      out.push(0x47, ...b);
    } else if ('tuple' in v) {
      out.push(0x28);
      v.tuple.forEach(write);
      out.push(0x74);
    } else if ('global' in v) {
      const dot = v.global.lastIndexOf('.');
      out.push(0x63, ...Buffer.from(`${v.global.slice(0, dot)}\n${v.global.slice(dot + 1)}\n`, 'latin1'));
    } else if ('reduce' in v) {
      write(v.reduce[0]);
      write({ tuple: v.reduce[1] });
      out.push(0x52);
    } else if ('newobj' in v) {
      write(v.newobj[0]);
      write({ tuple: v.newobj[1] });
      out.push(0x81);
    } else if ('build' in v) {
      write(v.build[0]);
      write(v.build[1]);
      out.push(0x62);
    } else {
      write(v.persid);
      out.push(0x51);
    }
  };
  write(value);
  out.push(0x2e);
  return Uint8Array.from(out);
}

/** A tensor as torch pickles it: _rebuild_tensor_v2 of storage `key` (of `numel` elements of `storage`). */
export function tensorPy(key: string, storage: string, numel: number, offset: number, size: number[], stride: number[]): Py {
  const pid: Py = { tuple: ['storage', { global: `torch.${storage}` }, key, 'cpu', numel] };
  return { reduce: [{ global: 'torch._utils._rebuild_tensor_v2' }, [{ persid: pid }, offset, { tuple: size }, { tuple: stride }, false, { reduce: [{ global: 'collections.OrderedDict' }, []] }]] };
}

/**
 * A zip archive of stored entries, as torch.save lays it out (`archive/data.pkl`, `archive/data/<key>`).
 * With `zip64`, every size and offset is given in ZIP64 fields (as for archives past 4 GiB).
 */
export function torchZip(data: Uint8Array, storages: ReadonlyMap<string, Uint8Array>, archive = 'archive', zip64 = false): Buffer {
  const entries: Array<[string, Uint8Array]> = [[`${archive}/data.pkl`, data], [`${archive}/byteorder`, Buffer.from('little')], ...[...storages].map(([key, bytes]): [string, Uint8Array] => [`${archive}/data/${key}`, bytes])];
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const [name, bytes] of entries) {
    const nameBytes = Buffer.from(name, 'utf8');
    const crc = crc32(bytes);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(bytes.length, 18);
    local.writeUInt32LE(bytes.length, 22);
    local.writeUInt16LE(nameBytes.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(zip64 ? 45 : 20, 4);
    central.writeUInt16LE(zip64 ? 45 : 20, 6);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(zip64 ? 0xffffffff : bytes.length, 20);
    central.writeUInt32LE(zip64 ? 0xffffffff : bytes.length, 24);
    central.writeUInt16LE(nameBytes.length, 28);
    central.writeUInt32LE(zip64 ? 0xffffffff : offset, 42);
    const extra = Buffer.alloc(zip64 ? 28 : 0);
    if (zip64) {
      extra.writeUInt16LE(0x0001, 0);
      extra.writeUInt16LE(24, 2);
      extra.writeBigUInt64LE(BigInt(bytes.length), 4);
      extra.writeBigUInt64LE(BigInt(bytes.length), 12);
      extra.writeBigUInt64LE(BigInt(offset), 20);
      central.writeUInt16LE(extra.length, 30);
    }
    locals.push(local, nameBytes, Buffer.from(bytes));
    centrals.push(central, nameBytes, extra);
    offset += 30 + nameBytes.length + bytes.length;
  }
  const directory = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(zip64 ? 0xffff : entries.length, 8);
  end.writeUInt16LE(zip64 ? 0xffff : entries.length, 10);
  end.writeUInt32LE(zip64 ? 0xffffffff : directory.length, 12);
  end.writeUInt32LE(zip64 ? 0xffffffff : offset, 16);
  if (!zip64) return Buffer.concat([...locals, directory, end]);
  const record = Buffer.alloc(56);
  record.writeUInt32LE(0x06064b50, 0);
  record.writeBigUInt64LE(44n, 4);
  record.writeUInt16LE(45, 12);
  record.writeUInt16LE(45, 14);
  record.writeBigUInt64LE(BigInt(entries.length), 24);
  record.writeBigUInt64LE(BigInt(entries.length), 32);
  record.writeBigUInt64LE(BigInt(directory.length), 40);
  record.writeBigUInt64LE(BigInt(offset), 48);
  const locator = Buffer.alloc(20);
  locator.writeUInt32LE(0x07064b50, 0);
  locator.writeBigUInt64LE(BigInt(offset + directory.length), 8);
  locator.writeUInt32LE(1, 16);
  return Buffer.concat([...locals, directory, record, locator, end]);
}

/** Writes `value` (its tensors' storages given by key) to `file` as a torch zip archive. */
export function torchSave(file: string, value: Py, storages: ReadonlyMap<string, Uint8Array> = new Map()): void {
  writeFileSync(file, torchZip(pickle(value), storages));
}

/** float32 values as little-endian bytes. */
export function f32(values: readonly number[]): Uint8Array {
  return new Uint8Array(Float32Array.from(values).buffer);
}
