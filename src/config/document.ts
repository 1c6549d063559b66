/** A parsed YAML definition file that remembers where each value came from. */
import { isMap, isScalar, LineCounter, parseDocument, type Document, type Node } from 'yaml';
import type { Diagnostic } from './diagnostic.ts';

/** A path into a definition: keys and array indices. */
export type ValuePath = ReadonlyArray<string | number>;

/** A position in the file, 1-based. */
export interface Position {
  line: number;
  column: number;
}

/** A definition file's plain value and a way back from a path to its line and column. */
export class DefinitionDocument {
  readonly value: unknown;
  /** YAML syntax errors (and duplicate keys); when present, `value` may be partial. */
  readonly syntaxErrors: Diagnostic[];
  private readonly lines = new LineCounter();
  private readonly doc: Document;

  constructor(
    readonly file: string,
    text: string,
  ) {
    this.doc = parseDocument(text, { lineCounter: this.lines, prettyErrors: true, uniqueKeys: true });
    this.syntaxErrors = [...this.doc.errors, ...this.doc.warnings].map((error) => {
      const [line, column] = error.linePos?.[0] ? [error.linePos[0].line, error.linePos[0].col] : [1, 1];
      return {
        file,
        line,
        column,
        severity: this.doc.errors.includes(error) ? 'error' : 'warning',
        message: `YAML: ${error.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '')}`,
      } satisfies Diagnostic;
    });
    try {
      this.value = this.doc.toJS({ maxAliasCount: 100 }) as unknown;
    } catch (error) {
      // Aliases that expand past the bound (a YAML "billion laughs"), said as a syntax error of the file.
      this.value = undefined;
      this.syntaxErrors.push({ file, line: 1, column: 1, severity: 'error', message: `YAML: ${(error as Error).message}` });
    }
  }

  /**
   * Where the value at `path` starts; with `key`, where its key starts instead. Falls back to the nearest
   * ancestor that exists, and to 1:1.
   */
  locate(path: ValuePath, options: { key?: boolean } = {}): Position {
    for (let depth = path.length; depth >= 0; depth--) {
      const prefix = path.slice(0, depth);
      const wantKey = options.key === true && depth === path.length && depth > 0;
      const node = wantKey ? this.keyNode(prefix) : (this.doc.getIn(prefix, true) as Node | undefined);
      const offset = node?.range?.[0];
      if (offset !== undefined) {
        const { line, col } = this.lines.linePos(offset);
        return { line, column: col };
      }
    }
    return { line: 1, column: 1 };
  }

  private keyNode(path: ValuePath): Node | undefined {
    const parent = this.doc.getIn(path.slice(0, -1), true);
    if (!isMap(parent)) return undefined;
    const last = path[path.length - 1];
    const pair = parent.items.find((item) => isScalar(item.key) && String(item.key.value) === String(last));
    return pair?.key as Node | undefined;
  }
}
