/**
 * Request validation: fastify runs each route's typebox schema with Ajv (no type coercion, every
 * schema's `expected` kept as an annotation), and a failure becomes one CHORUS_INVALID_ARGUMENT naming
 * the field: `<field> must be <expected>, got <value>`, or `Unrecognized request argument supplied:
 * <field>` for a field the schema does not know.
 */
import type { ErrorObject } from 'ajv';
import { ChorusError, invalidArgument } from '../errors.ts';

/** fastify's Ajv options for the routes' schemas. */
export const AJV_OPTIONS = { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false, verbose: true, keywords: ['expected'] };

interface Annotated {
  expected?: string;
  properties?: Record<string, Annotated>;
  type?: string;
}

/** `/messages/0/content` as `messages[0].content`; the root as `body`. */
function fieldOf(instancePath: string): string {
  if (instancePath === '') return 'body';
  return instancePath
    .slice(1)
    .split('/')
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, part) => (/^\d+$/.test(part) ? `${path}[${part}]` : path === '' ? part : `${path}.${part}`), '');
}

/** The value a schema wants, in words, when it does not say. */
function described(schema: Annotated | undefined): string {
  if (schema?.expected !== undefined) return schema.expected;
  switch (schema?.type) {
    case 'string':
      return 'a string';
    case 'boolean':
      return 'true or false';
    case 'integer':
      return 'an integer';
    case 'number':
      return 'a number';
    case 'array':
      return 'a list';
    case 'object':
      return 'an object';
    default:
      return 'a valid value';
  }
}

/** The first schema failure of a request as a ChorusError naming the field. */
export function validationError(errors: readonly ErrorObject[]): ChorusError {
  // A union's own error says what the field may be; its branches' errors say less, unless a branch
  // got inside the field (an object's member, a list's element) and failed there.
  const union = errors.find((e) => e.keyword === 'anyOf');
  const objectBranch = (e: ErrorObject): boolean => e.instancePath === union!.instancePath && (e.keyword === 'additionalProperties' || e.keyword === 'required');
  const inside = union === undefined ? [] : errors.filter((e) => e.instancePath.startsWith(`${union.instancePath}/`) || objectBranch(e));
  const error = inside.sort((a, b) => b.instancePath.length - a.instancePath.length)[0] ?? union ?? errors[0];
  if (error === undefined) return new ChorusError('CHORUS_INVALID_ARGUMENT', 'the request failed its schema');
  const at = fieldOf(error.instancePath);
  if (error.keyword === 'additionalProperties') {
    const field = (error.params as { additionalProperty: string }).additionalProperty;
    return new ChorusError('CHORUS_INVALID_ARGUMENT', `Unrecognized request argument supplied: ${field}`, { param: at === 'body' ? field : `${at}.${field}` });
  }
  const parent = error.parentSchema as Annotated | undefined;
  if (error.keyword === 'required') {
    const missing = (error.params as { missingProperty: string }).missingProperty;
    const property = parent?.properties?.[missing];
    if (property?.expected !== undefined) return invalidArgument(at === 'body' ? missing : `${at}.${missing}`, property.expected, undefined);
    return invalidArgument(at, described(parent), error.data);
  }
  return invalidArgument(at, described(parent), error.data);
}
