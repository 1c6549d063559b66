/** A problem found in a repository definition, at a place in its file. */
export interface Diagnostic {
  file: string;
  /** 1-based. */
  line: number;
  /** 1-based. */
  column: number;
  severity: 'error' | 'warning';
  message: string;
}

/** `file:line:column: severity: message`, the form editors and CI logs link. */
export function formatDiagnostic(d: Diagnostic): string {
  return `${d.file}:${d.line}:${d.column}: ${d.severity}: ${d.message}`;
}

/** Orders diagnostics by file, then position. */
export function compareDiagnostics(a: Diagnostic, b: Diagnostic): number {
  return a.file.localeCompare(b.file) || a.line - b.line || a.column - b.column;
}
