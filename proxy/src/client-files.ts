// Serves the browser client for the demo under /client/, with no build step: `.ts` modules go out as
// JavaScript after Node's type stripping, which blanks annotations in place so positions in browser
// devtools still match the source. Only regular files of known types inside the directory are
// served; dotfiles and anything resolving outside it are 404s.
import { readFile, realpath, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { stripTypeScriptTypes } from 'node:module';
import path from 'node:path';
import { CORS_HEADERS } from './cors.ts';
import { Problem } from './problem.ts';

export const CLIENT_PREFIX = '/client/';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.ts': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

interface Loaded {
  mtimeMs: number;
  body: Buffer;
  etag: string;
}

export interface ClientFiles {
  handles(pathname: string): boolean;
  /** Serves the file; throws a Problem (404, 405) when it cannot. */
  serve(req: IncomingMessage, res: ServerResponse, pathname: string): Promise<void>;
}

export function createClientFiles(directory: string): ClientFiles {
  const cache = new Map<string, Loaded>();
  let root: Promise<string> | undefined;

  async function load(file: string): Promise<Loaded | undefined> {
    const info = await stat(file).catch(() => undefined);
    if (!info?.isFile()) return undefined;
    const cached = cache.get(file);
    if (cached?.mtimeMs === info.mtimeMs) return cached;
    let body = await readFile(file);
    if (file.endsWith('.ts')) body = Buffer.from(stripTypeScriptTypes(body.toString('utf8'), { mode: 'strip' }));
    const loaded = { mtimeMs: info.mtimeMs, body, etag: `"${info.mtimeMs.toString(36)}-${body.length.toString(36)}"` };
    cache.set(file, loaded);
    return loaded;
  }

  return {
    handles: (pathname) => pathname === CLIENT_PREFIX.slice(0, -1) || pathname.startsWith(CLIENT_PREFIX),

    async serve(req, res, pathname) {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        throw new Problem('method-not-allowed', `${req.method} is not allowed on the client files; use GET`, { allow: 'GET, HEAD' });
      }
      if (pathname === CLIENT_PREFIX.slice(0, -1)) {
        // "/client" → "/client/" so relative module URLs resolve inside the directory; the query
        // (signaling URL and options) is kept.
        const query = req.url?.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
        res.writeHead(301, { ...CORS_HEADERS, location: CLIENT_PREFIX + query, 'content-length': '0' });
        res.end();
        return;
      }
      const notFound = new Problem('not-found', `no client file at ${pathname}`);
      let relative: string;
      try {
        relative = decodeURIComponent(pathname.slice(CLIENT_PREFIX.length)) || 'index.html';
      } catch {
        throw notFound;
      }
      const type = CONTENT_TYPES[path.extname(relative)];
      if (!type || relative.includes('\0') || relative.split(/[/\\]/).some((part) => part.startsWith('.'))) throw notFound;
      root ??= realpath(directory).catch(() => directory);
      const base = await root;
      // realpath also resolves symbolic links, so a link pointing out of the directory is refused too.
      const file = await realpath(path.join(base, relative)).catch(() => undefined);
      if (!file || !file.startsWith(base + path.sep)) throw notFound;
      const loaded = await load(file);
      if (!loaded) throw notFound;
      if (req.headers['if-none-match'] === loaded.etag) {
        res.writeHead(304, { ...CORS_HEADERS, etag: loaded.etag });
        res.end();
        return;
      }
      res.writeHead(200, {
        ...CORS_HEADERS,
        'content-type': type,
        'content-length': String(loaded.body.length),
        etag: loaded.etag,
        'cache-control': 'no-cache',
        'x-content-type-options': 'nosniff',
      });
      res.end(req.method === 'HEAD' ? undefined : loaded.body);
    },
  };
}
