/**
 * A whole repository on S3 (`s3://bucket/prefix`, as Triton's `--model-repository=s3://...`): mirrored
 * into `$CHORUS_CACHE/s3-repositories/<bucket>/<prefix>/` and served from there. Each sync lists the
 * prefix, downloads the objects that are new or changed (by ETag; each to a temporary name, renamed
 * when complete), and deletes local files whose objects are gone, so a sync during polling applies
 * exactly what changed. Endpoint and credentials come from the AWS environment, as for s3:// sources.
 */
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { ChorusError } from '../errors.ts';
import { cacheDir } from './source.ts';

const S3_REPOSITORY = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/;
/** What the last sync saw: object key (relative to the prefix) -> ETag. */
const MANIFEST = '.chorus-objects.json';

/** The result of a sync. */
export interface S3RepositorySync {
  /** The local mirror: a repository directory. */
  dir: string;
  /** Paths (relative to the repository) downloaded or deleted by this sync. */
  changed: string[];
}

/** True when `repository` names an S3 prefix. */
export function isS3Repository(repository: string): boolean {
  return repository.startsWith('s3://');
}

/** Mirrors the repository at `url`; throws naming the URL when it cannot. */
export async function syncS3Repository(url: string, log?: (line: string) => void): Promise<S3RepositorySync> {
  const match = S3_REPOSITORY.exec(url);
  if (match === null) throw new ChorusError('CHORUS_INVALID_ARGUMENT', `--repository ${url} must be s3://<bucket>[/<prefix>]`, { param: 'repository', value: url });
  const bucket = match[1]!;
  const prefix = (match[2] ?? '').replace(/\/+$/, '');
  const base = prefix === '' ? '' : `${prefix}/`;
  const dir = join(cacheDir(), 's3-repositories', bucket, prefix);
  mkdirSync(dir, { recursive: true });
  const manifestFile = join(dir, MANIFEST);
  const before = existsSync(manifestFile) ? (JSON.parse(readFileSync(manifestFile, 'utf8')) as Record<string, string>) : {};
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  const s3 = new S3Client({ region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1', endpoint, forcePathStyle: endpoint !== undefined, maxAttempts: 2 });
  const changed: string[] = [];
  try {
    const now: Record<string, string> = {};
    let token: string | undefined;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: base, ContinuationToken: token }));
      for (const object of page.Contents ?? []) {
        if (object.Key === undefined || object.Key.endsWith('/')) continue;
        now[object.Key.slice(base.length)] = object.ETag ?? `${object.Size}:${object.LastModified?.toISOString()}`;
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    if (Object.keys(now).length === 0) throw new ChorusError('CHORUS_FILE_MISSING', `${url} holds no objects: expected a repository (tokenizers/, models/, ensembles/, pipelines/)`, { value: url });
    for (const [key, etag] of Object.entries(now)) {
      const out = join(dir, key);
      if (before[key] === etag && existsSync(out)) continue;
      log?.(`downloading s3://${bucket}/${base}${key}`);
      const response = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: `${base}${key}` }));
      mkdirSync(dirname(out), { recursive: true });
      const partial = `${out}.partial`;
      try {
        await pipeline(response.Body as Readable, createWriteStream(partial));
      } catch (error) {
        rmSync(partial, { force: true });
        throw error;
      }
      renameSync(partial, out);
      changed.push(key);
    }
    for (const key of Object.keys(before)) {
      if (key in now) continue;
      rmSync(join(dir, key), { force: true });
      changed.push(key);
    }
    writeFileSync(manifestFile, JSON.stringify(now));
  } catch (error) {
    if (error instanceof ChorusError) throw error;
    const name = (error as { name?: string }).name;
    if (name === 'NoSuchBucket') throw new ChorusError('CHORUS_NOT_FOUND', `${url}: bucket ${bucket} does not exist`, { value: url, cause: error });
    const message = error instanceof Error ? error.message || name || 'error' : String(error);
    throw new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `cannot sync repository ${url}${endpoint === undefined ? '' : ` from ${endpoint}`}: ${message}`, { value: url, cause: error });
  } finally {
    s3.destroy();
  }
  return { dir, changed: changed.sort() };
}
