/** Checks a definition against its kind's schema; every violation becomes a diagnostic at its line. */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { describe } from '../errors.ts';
import type { Diagnostic } from './diagnostic.ts';
import type { DefinitionDocument, ValuePath } from './document.ts';
import { KINDS, type Kind } from './schemas.ts';

const ajv = new Ajv({ allErrors: true, strict: false, verbose: true });
const validators = new Map<Kind, ValidateFunction>();

function validatorFor(kind: Kind): ValidateFunction {
  let validate = validators.get(kind);
  if (validate === undefined) {
    validate = ajv.compile(KINDS[kind].schema);
    validators.set(kind, validate);
  }
  return validate;
}

/** The schema violations of `doc` as a `kind` definition (none when it conforms). */
export function validateSchema(kind: Kind, doc: DefinitionDocument): Diagnostic[] {
  const validate = validatorFor(kind);
  if (validate(doc.value)) return [];
  return (validate.errors ?? []).map((error) => toDiagnostic(kind, doc, error));
}

function toDiagnostic(kind: Kind, doc: DefinitionDocument, error: ErrorObject): Diagnostic {
  const path = pointerToPath(error.instancePath);
  const where = pathText(path);
  let message: string;
  let at = doc.locate(path);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      message = `${where === '' ? `a ${kind}` : where} is missing the required field "${String(params.missingProperty)}"`;
      break;
    case 'additionalProperties': {
      const field = String(params.additionalProperty);
      const known = Object.keys((error.parentSchema?.properties as object | undefined) ?? {});
      message = `unknown field "${joinPath(where, field)}"${known.length > 0 ? `; expected one of: ${known.join(', ')}` : ''}`;
      at = doc.locate([...path, field], { key: true });
      break;
    }
    case 'enum':
      message = `${where} must be one of ${(params.allowedValues as unknown[]).join(', ')}, got ${describe(error.data)}`;
      break;
    case 'type':
      message = `${where || 'the file'} must be ${article(String(params.type))}, got ${typeName(error.data)}`;
      break;
    case 'pattern':
      // Schemas with a pattern say in `expected` what the pattern means.
      message = `${where} must be ${String(error.parentSchema?.expected ?? `text matching ${String(params.pattern)}`)}, got ${describe(error.data)}`;
      break;
    default:
      message = `${where || 'the file'} ${error.message ?? 'is invalid'}, got ${describe(error.data)}`;
  }
  return { file: doc.file, ...at, severity: 'error', message };
}

function pointerToPath(pointer: string): ValuePath {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
}

/** `steps[1].inputs.text`, the way people write paths into YAML. */
export function pathText(path: ValuePath): string {
  return path.reduce<string>((text, part) => (typeof part === 'number' ? `${text}[${part}]` : joinPath(text, part)), '');
}

function joinPath(base: string, key: string): string {
  return base === '' ? key : `${base}.${key}`;
}

function article(type: string): string {
  return type === 'integer' || type === 'array' || type === 'object' ? `an ${type}` : `a ${type}`;
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return `${typeof value} ${describe(value)}`;
}
