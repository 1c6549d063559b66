/**
 * A local stand-in for the Hugging Face Hub's file API, enough for @huggingface/hub's listFiles and
 * downloadFile: GET /api/models/<id>/tree/<revision> and GET /<id>/resolve/<revision>/<path> (with
 * Range). With `token`, requests without `Authorization: Bearer <token>` get 401.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HubServer {
  url: string;
  /** Paths requested, in order. */
  requests: string[];
  close(): Promise<void>;
}

export async function startHubServer(repos: Record<string, Record<string, Buffer>>, options: { token?: string } = {}): Promise<HubServer> {
  const requests: string[] = [];
  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    requests.push(url.pathname);
    if (options.token !== undefined && request.headers.authorization !== `Bearer ${options.token}`) {
      response.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'Invalid credentials' }));
      return;
    }
    const tree = /^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/.exec(url.pathname);
    if (tree !== null) {
      const files = repos[tree[1]!];
      if (files === undefined) {
        response.writeHead(404, { 'content-type': 'application/json', 'x-error-code': 'RepoNotFound' }).end(JSON.stringify({ error: 'Repository not found' }));
        return;
      }
      const list = Object.entries(files).map(([path, data]) => ({ type: 'file', oid: `oid-${path}`, size: data.length, path }));
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(list));
      return;
    }
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    const data = resolve === null ? undefined : repos[resolve[1]!]?.[decodeURIComponent(resolve[3]!)];
    if (data === undefined) {
      response.writeHead(404, { 'x-error-code': 'EntryNotFound' }).end('Entry not found');
      return;
    }
    const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? '');
    const headers = { etag: `"etag-${data.length}"`, 'accept-ranges': 'bytes', 'content-type': 'application/octet-stream' };
    if (range === null) {
      response.writeHead(200, { ...headers, 'content-length': data.length }).end(data);
      return;
    }
    const start = Number(range[1]);
    const end = range[2] === '' ? data.length - 1 : Math.min(Number(range[2]), data.length - 1);
    response.writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${data.length}`, 'content-length': end - start + 1 }).end(data.subarray(start, end + 1));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
