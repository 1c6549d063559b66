/** Fetching a remote source (a Hugging Face id or an S3 prefix) into its cache directory. */
import { fetchFromHub } from './hub.ts';
import { fetchFromS3 } from './s3.ts';
import type { ResolvedSource } from './source.ts';

/** True when the source's files are fetched (not read where they are). */
export function isRemote(source: ResolvedSource): source is Exclude<ResolvedSource, { kind: 'local' }> {
  return source.kind !== 'local';
}

/** Downloads what the source (or its `file`) holds into `source.path`. */
export async function fetchSource(source: Exclude<ResolvedSource, { kind: 'local' }>, options: { file?: string; log?: (line: string) => void } = {}): Promise<void> {
  if (source.kind === 'hf') await fetchFromHub({ ...source, ...options });
  else await fetchFromS3({ ...source, ...options });
}

/** The source as its users wrote it, for messages. */
export function describeSource(source: Exclude<ResolvedSource, { kind: 'local' }>): string {
  return source.kind === 'hf' ? source.id : `s3://${source.bucket}/${source.prefix}`;
}
