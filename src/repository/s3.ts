/**
 * Fetching an `s3://bucket/prefix` source into the cache (`$CHORUS_CACHE/s3/<bucket>/<prefix>/`) with
 * `@aws-sdk/client-s3`: every object under the prefix (or only `file`), written as one cache entry
 * (cache-entry.ts: into a temporary directory renamed into place when every object is there, one
 * process at a time). Credentials and region come from the AWS environment as usual;
 * `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`) points at an S3-compatible server (MinIO, a test server),
 * addressed path-style.
 */
import { createWriteStream, existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { ChorusError } from '../errors.ts';
import { writeEntry } from './cache-entry.ts';

export interface S3Fetch {
  bucket: string;
  prefix: string;
  /** The cache directory the objects go to. */
  path: string;
  /** Only this object (relative to the prefix). Default: every object under the prefix. */
  file?: string;
  log?: (line: string) => void;
}

function client(): S3Client {
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  return new S3Client({ region: process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1', endpoint, forcePathStyle: endpoint !== undefined, maxAttempts: 2 });
}

/** Downloads the source's objects; throws naming the s3:// URL when it cannot. */
export async function fetchFromS3(target: S3Fetch): Promise<void> {
  const url = `s3://${target.bucket}/${target.prefix}`;
  const s3 = client();
  const base = target.prefix === '' || target.prefix.endsWith('/') ? target.prefix : `${target.prefix}/`;
  try {
    const objects: Array<{ key: string; size: number }> = [];
    let token: string | undefined;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: target.bucket, Prefix: target.file === undefined ? base : `${base}${target.file}`, ContinuationToken: token }));
      for (const object of page.Contents ?? []) if (object.Key !== undefined && !object.Key.endsWith('/')) objects.push({ key: object.Key, size: object.Size ?? 0 });
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    const wanted = target.file === undefined ? objects : objects.filter((o) => o.key === `${base}${target.file}`);
    if (wanted.length === 0) {
      throw new ChorusError('CHORUS_FILE_MISSING', target.file === undefined ? `${url} holds no objects` : `s3://${target.bucket}/${base}${target.file} does not exist`, { value: url });
    }
    const present = (dir: string, object: { key: string; size: number }): boolean => {
      const out = join(dir, object.key.slice(base.length));
      return existsSync(out) && statSync(out).size === object.size;
    };
    const download = async (dir: string): Promise<void> => {
      for (const object of wanted) {
        if (present(dir, object)) continue;
        const out = join(dir, object.key.slice(base.length));
        target.log?.(`downloading s3://${target.bucket}/${object.key} (${object.size} bytes)`);
        const response = await s3.send(new GetObjectCommand({ Bucket: target.bucket, Key: object.key }));
        mkdirSync(dirname(out), { recursive: true });
        await pipeline(response.Body as Readable, createWriteStream(out));
      }
    };
    await writeEntry(target.path, download, { keepFiles: true, complete: (dir) => wanted.every((object) => present(dir, object)), log: target.log });
  } catch (error) {
    if (error instanceof ChorusError) throw error;
    const name = (error as { name?: string }).name;
    if (name === 'NoSuchBucket') throw new ChorusError('CHORUS_NOT_FOUND', `${url}: bucket ${target.bucket} does not exist`, { value: url, cause: error });
    if (name === 'AccessDenied' || name === 'InvalidAccessKeyId' || name === 'SignatureDoesNotMatch') {
      throw new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `${url}: access denied (${name}); check the AWS credentials`, { value: url, cause: error });
    }
    const message = error instanceof Error ? error.message || name || 'error' : String(error);
    const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
    throw new ChorusError('CHORUS_SOURCE_UNAVAILABLE', `cannot fetch ${url}${endpoint === undefined ? '' : ` from ${endpoint}`}: ${message}`, { value: url, cause: error });
  } finally {
    s3.destroy();
  }
}
