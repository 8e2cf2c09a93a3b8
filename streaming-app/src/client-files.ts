// Serves the browser client (streaming-app/client/) with no build step: .ts modules are sent as
// JavaScript after Node's own type stripping, which only blanks the annotations (line and column
// positions stay, so browser devtools point at the right place in the .ts source).
// The platform's proxy can reuse this handler to serve the same files to browsers.
import { readFile, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { stripTypeScriptTypes } from 'node:module';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { notFound } from './http-problem.ts';

export const CLIENT_DIR = fileURLToPath(new URL('../client/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.ts': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

export type ClientFiles = {
  /** URL prefix the files live under, e.g. "/client/". */
  prefix: string;
  handles(path: string): boolean;
  serve(req: IncomingMessage, res: ServerResponse, path: string): void;
};

type Cached = { mtimeMs: number; body: Buffer; etag: string };

export function createClientFiles(prefix = '/client/', root = CLIENT_DIR): ClientFiles {
  const cache = new Map<string, Cached>();

  async function load(file: string): Promise<Cached | undefined> {
    const info = await stat(file).catch(() => undefined);
    if (!info?.isFile()) return undefined;
    const hit = cache.get(file);
    if (hit && hit.mtimeMs === info.mtimeMs) return hit;
    let body = await readFile(file);
    if (file.endsWith('.ts')) body = Buffer.from(stripTypeScriptTypes(body.toString('utf8'), { mode: 'strip' }));
    const entry = { mtimeMs: info.mtimeMs, body, etag: `"${info.mtimeMs.toString(36)}-${body.length.toString(36)}"` };
    cache.set(file, entry);
    return entry;
  }

  return {
    prefix,
    handles: (path) => path === prefix.slice(0, -1) || path.startsWith(prefix),
    serve(req, res, path) {
      if (path === prefix.slice(0, -1)) {
        // "/client" -> "/client/" keeps relative module URLs resolving inside the directory; the query
        // string (signaling URL and options) is carried along.
        const query = (req.url ?? '').includes('?') ? (req.url ?? '').slice((req.url ?? '').indexOf('?')) : '';
        res.writeHead(301, { location: prefix + query, 'content-length': 0 });
        res.end();
        return;
      }
      let relative: string;
      try {
        relative = decodeURIComponent(path.slice(prefix.length)) || 'index.html';
      } catch {
        notFound(req, res);
        return;
      }
      const file = normalize(join(root, relative));
      const type = CONTENT_TYPES[extname(file)];
      // Only files inside the client directory, only known types, no tsconfig.json or dotfiles.
      if (!file.startsWith(root.endsWith(sep) ? root : root + sep) || !type || relative.split('/').some((p) => p.startsWith('.'))) {
        notFound(req, res);
        return;
      }
      load(file).then((entry) => {
        if (!entry) { notFound(req, res); return; }
        if (req.headers['if-none-match'] === entry.etag) {
          res.writeHead(304, { etag: entry.etag });
          res.end();
          return;
        }
        res.writeHead(200, {
          'content-type': type, 'content-length': entry.body.length, etag: entry.etag,
          'cache-control': 'no-cache', 'x-content-type-options': 'nosniff',
        });
        res.end(req.method === 'HEAD' ? undefined : entry.body);
      }, () => {
        if (!res.headersSent) notFound(req, res);
      });
    },
  };
}
