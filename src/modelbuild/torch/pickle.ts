/**
 * A restricted reader of Python pickles (protocols 0 to 5). It runs the pickle's stack machine over
 * plain values only: every GLOBAL the pickle names must be in the caller's table of known globals, and
 * a name outside it fails the read at once, naming it as the pickle writes it (`posix.system`,
 * `__builtin__.eval`). Nothing from the file is ever executed: REDUCE, NEWOBJ and BUILD call the
 * table's own functions, which build tensors, dicts and attribute bags.
 *
 * Values: None is null, bool and str are themselves, int is a number (a bigint past 2^53), float a
 * number, bytes a Uint8Array, list and tuple arrays, dict a Map.
 */
import { ChorusError } from '../../errors.ts';

/** A global the table allows: what REDUCE (`call`), NEWOBJ (`construct`) and BUILD on its results do. */
export interface KnownGlobal {
  /** `module.name` as the pickle wrote it. */
  readonly name: string;
  /** REDUCE: the value for these arguments. Absent: REDUCE on this global is refused. */
  call?(args: unknown[]): unknown;
  /** NEWOBJ: a new instance. Absent: NEWOBJ on this global is refused. */
  construct?(args: unknown[]): unknown;
}

/** A global as it sits on the pickle's stack: its name and what the table lets it do. */
export class GlobalRef {
  constructor(readonly global: KnownGlobal) {}
  get name(): string {
    return this.global.name;
  }
}

/** A value that takes BUILD's state (an attribute bag, an ignored buffer). */
export interface Buildable {
  setState(state: unknown): void;
}

/** What a pickle may refer to beyond plain values. */
export interface PickleContext {
  /** The file, for messages. */
  readonly source: string;
  /** The global `module.name`, or undefined when it is not allowed. */
  global(module: string, name: string): KnownGlobal | undefined;
  /** The value of a persistent id (torch's storages). */
  persistentLoad(pid: unknown): unknown;
}

/** The `param` of the error for a pickle that ends before its STOP (a reader of a window may read more). */
export const PICKLE_ENDS_EARLY = 'pickle-end';

/** Reads the pickle at `bytes[start]`; returns its value and the offset after its STOP. */
export function unpickle(bytes: Uint8Array, context: PickleContext, start = 0): { value: unknown; end: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const decoder = new TextDecoder('utf-8', { fatal: false });
  const latin1 = new TextDecoder('latin1');
  let at = start;
  let stack: unknown[] = [];
  const marks: unknown[][] = [];
  const memo = new Map<number, unknown>();

  const fail = (detail: string): never => {
    throw new ChorusError('CHORUS_FILE_INVALID', `${context.source}: not a readable pickle: ${detail} (at byte ${at})`);
  };
  const need = (n: number): void => {
    if (at + n > bytes.byteLength) throw new ChorusError('CHORUS_FILE_INVALID', `${context.source}: not a readable pickle: it ends before its STOP opcode (truncated)`, { param: PICKLE_ENDS_EARLY });
  };
  const u8 = (): number => (need(1), bytes[at++]!);
  const u16 = (): number => (need(2), (at += 2), view.getUint16(at - 2, true));
  const u32 = (): number => (need(4), (at += 4), view.getUint32(at - 4, true));
  const u64 = (): number => {
    need(8);
    const value = view.getBigUint64(at, true);
    at += 8;
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) fail(`a length of ${value} bytes`);
    return Number(value);
  };
  const take = (n: number): Uint8Array => (need(n), (at += n), bytes.subarray(at - n, at));
  const line = (): string => {
    const end = bytes.indexOf(0x0a, at);
    if (end < 0) need(bytes.byteLength - at + 1);
    const text = latin1.decode(bytes.subarray(at, end));
    at = end + 1;
    return text;
  };
  const pop = (): unknown => (stack.length === 0 ? fail('the stack is empty') : stack.pop());
  const top = (): unknown => (stack.length === 0 ? fail('the stack is empty') : stack[stack.length - 1]);
  const popMark = (): unknown[] => {
    const items = stack;
    stack = marks.pop() ?? fail('a MARK is missing');
    return items;
  };
  const known = (module: string, name: string): GlobalRef => {
    const found = context.global(module, name);
    if (found === undefined) {
      throw new ChorusError('CHORUS_FILE_INVALID', `${context.source}: refused: its pickle names ${module}.${name}, which is not a tensor, a storage or a plain container (the pickle was read, never run)`, {
        param: 'pickle',
        value: `${module}.${name}`,
      });
    }
    return new GlobalRef(found);
  };
  const asGlobal = (value: unknown, op: string): KnownGlobal => (value instanceof GlobalRef ? value.global : fail(`${op} on a value that is not a global`));
  const setItems = (dict: unknown, items: unknown[]): void => {
    if (!(dict instanceof Map)) fail('SETITEMS on a value that is not a dict');
    for (let i = 0; i + 1 < items.length; i += 2) (dict as Map<unknown, unknown>).set(items[i], items[i + 1]);
  };
  const append = (list: unknown, items: unknown[]): void => {
    if (!Array.isArray(list) || Object.isFrozen(list)) fail('APPEND on a value that is not a list');
    (list as unknown[]).push(...items);
  };
  const int = (text: string): number | bigint | boolean => {
    if (text === '00') return false;
    if (text === '01') return true;
    if (!/^[-+]?\d+L?$/.test(text)) fail(`an INT or LONG opcode holds ${JSON.stringify(text.slice(0, 20))}`);
    const n = BigInt(text.replace(/L$/, ''));
    return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
  };
  const long = (raw: Uint8Array): number | bigint => {
    let n = 0n;
    for (let i = raw.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(raw[i]!);
    if (raw.length > 0 && raw[raw.length - 1]! >= 0x80) n -= 1n << BigInt(8 * raw.length);
    return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
  };

  for (;;) {
    const op = u8();
    switch (op) {
      case 0x80: u8(); break; // PROTO
      case 0x95: u64(); break; // FRAME
      case 0x2e: return { value: pop(), end: at }; // STOP
      case 0x28: marks.push(stack); stack = []; break; // MARK
      case 0x30: pop(); break; // POP
      case 0x31: popMark(); break; // POP_MARK
      case 0x32: stack.push(top()); break; // DUP
      case 0x4e: stack.push(null); break; // NONE
      case 0x88: stack.push(true); break; // NEWTRUE
      case 0x89: stack.push(false); break; // NEWFALSE
      case 0x49: stack.push(int(line())); break; // INT
      case 0x4c: stack.push(int(line())); break; // LONG
      case 0x4a: need(4); stack.push(view.getInt32(at, true)); at += 4; break; // BININT
      case 0x4b: stack.push(u8()); break; // BININT1
      case 0x4d: stack.push(u16()); break; // BININT2
      case 0x8a: stack.push(long(take(u8()))); break; // LONG1
      case 0x8b: stack.push(long(take(u32()))); break; // LONG4
      case 0x46: stack.push(Number.parseFloat(line())); break; // FLOAT
      case 0x47: need(8); stack.push(view.getFloat64(at, false)); at += 8; break; // BINFLOAT
      case 0x53: stack.push(pythonString(line())); break; // STRING
      case 0x54: stack.push(latin1.decode(take(u32()))); break; // BINSTRING
      case 0x55: stack.push(latin1.decode(take(u8()))); break; // SHORT_BINSTRING
      case 0x56: stack.push(rawUnicode(line())); break; // UNICODE
      case 0x58: stack.push(decoder.decode(take(u32()))); break; // BINUNICODE
      case 0x8c: stack.push(decoder.decode(take(u8()))); break; // SHORT_BINUNICODE
      case 0x8d: stack.push(decoder.decode(take(u64()))); break; // BINUNICODE8
      case 0x42: stack.push(take(u32()).slice()); break; // BINBYTES
      case 0x43: stack.push(take(u8()).slice()); break; // SHORT_BINBYTES
      case 0x8e: stack.push(take(u64()).slice()); break; // BINBYTES8
      case 0x96: stack.push(take(u64()).slice()); break; // BYTEARRAY8
      case 0x29: stack.push(Object.freeze([])); break; // EMPTY_TUPLE
      case 0x74: { const items = popMark(); stack.push(Object.freeze(items)); break; } // TUPLE
      case 0x85: stack.push(Object.freeze([pop()])); break; // TUPLE1
      case 0x86: { const b = pop(); stack.push(Object.freeze([pop(), b])); break; } // TUPLE2
      case 0x87: { const c = pop(); const b = pop(); stack.push(Object.freeze([pop(), b, c])); break; } // TUPLE3
      case 0x5d: stack.push([]); break; // EMPTY_LIST
      case 0x6c: { const items = popMark(); stack.push(items); break; } // LIST
      case 0x61: { const item = pop(); append(top(), [item]); break; } // APPEND
      case 0x65: { const items = popMark(); append(top(), items); break; } // APPENDS
      case 0x7d: stack.push(new Map()); break; // EMPTY_DICT
      case 0x64: { const items = popMark(); const dict = new Map(); setItems(dict, items); stack.push(dict); break; } // DICT
      case 0x73: { const value = pop(); const key = pop(); setItems(top(), [key, value]); break; } // SETITEM
      case 0x75: { const items = popMark(); setItems(top(), items); break; } // SETITEMS
      case 0x8f: stack.push([]); break; // EMPTY_SET
      case 0x90: { const items = popMark(); append(top(), items); break; } // ADDITEMS
      case 0x91: { const items = popMark(); stack.push(Object.freeze(items)); break; } // FROZENSET
      case 0x70: memo.set(Number(line()), top()); break; // PUT
      case 0x71: memo.set(u8(), top()); break; // BINPUT
      case 0x72: memo.set(u32(), top()); break; // LONG_BINPUT
      case 0x94: memo.set(memo.size, top()); break; // MEMOIZE
      case 0x67: stack.push(recall(memo, Number(line()), fail)); break; // GET
      case 0x68: stack.push(recall(memo, u8(), fail)); break; // BINGET
      case 0x6a: stack.push(recall(memo, u32(), fail)); break; // LONG_BINGET
      case 0x63: { const module = line(); stack.push(known(module, line())); break; } // GLOBAL
      case 0x93: { const name = pop(); const module = pop(); stack.push(known(String(module), String(name))); break; } // STACK_GLOBAL
      case 0x50: stack.push(context.persistentLoad(line())); break; // PERSID
      case 0x51: stack.push(context.persistentLoad(pop())); break; // BINPERSID
      case 0x52: { // REDUCE
        const args = pop();
        const callee = asGlobal(pop(), 'REDUCE');
        if (callee.call === undefined || !Array.isArray(args)) fail(`${callee.name} cannot be called here`);
        stack.push(callee.call!(args as unknown[]));
        break;
      }
      case 0x81: { // NEWOBJ
        const args = pop();
        const cls = asGlobal(pop(), 'NEWOBJ');
        if (cls.construct === undefined || !Array.isArray(args)) fail(`${cls.name} cannot be constructed here`);
        stack.push(cls.construct!(args as unknown[]));
        break;
      }
      case 0x92: { // NEWOBJ_EX
        pop();
        const args = pop();
        const cls = asGlobal(pop(), 'NEWOBJ_EX');
        if (cls.construct === undefined || !Array.isArray(args)) fail(`${cls.name} cannot be constructed here`);
        stack.push(cls.construct!(args as unknown[]));
        break;
      }
      case 0x62: { // BUILD
        const state = pop();
        const target = top();
        if (isBuildable(target)) target.setState(state);
        else if (target instanceof Map && (state === null || state instanceof Map)) break; // an OrderedDict's attributes (a state dict's _metadata)
        else fail('BUILD on a value that takes no state');
        break;
      }
      default:
        fail(`opcode 0x${op.toString(16).padStart(2, '0')} is not read (object-building opcodes such as INST and OBJ are refused)`);
    }
  }
}

function isBuildable(value: unknown): value is Buildable {
  return typeof value === 'object' && value !== null && typeof (value as Buildable).setState === 'function';
}

function recall(memo: Map<number, unknown>, key: number, fail: (detail: string) => never): unknown {
  return memo.has(key) ? memo.get(key) : fail(`memo ${key} was never stored`);
}

/** A protocol-0 STRING: a quoted Python literal with backslash escapes. */
function pythonString(text: string): string {
  const body = text.slice(1, -1);
  return body.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, e: string) => (e[0] === 'x' ? String.fromCharCode(Number.parseInt(e.slice(1), 16)) : ({ n: '\n', r: '\r', t: '\t' } as Record<string, string>)[e] ?? e));
}

/** A protocol-0 UNICODE: raw-unicode-escape. */
function rawUnicode(text: string): string {
  return text.replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g, (_, a?: string, b?: string) => String.fromCodePoint(Number.parseInt(a ?? b!, 16)));
}
