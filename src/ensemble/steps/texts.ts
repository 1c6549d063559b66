/** The strings of a BYTES tensor, one per batch row. */
import { ChorusError } from '../../errors.ts';
import type { Tensor } from '../tensor.ts';

export function texts(t: Tensor, port: string): string[] {
  if (t.datatype !== 'BYTES') throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${port} must be BYTES, got ${t.datatype}`, { param: port });
  const batch = t.shape[0] ?? 1;
  if (t.data.length !== batch) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${port} must hold one string per batch row (shape [batch] or [batch, 1]), got shape [${t.shape.join(', ')}]`, { param: port });
  return t.data as string[];
}
