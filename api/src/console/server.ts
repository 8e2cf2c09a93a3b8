// The web console (api/console/): static files under /console/ on the api host, with no build step. Its .ts
// modules go out as JavaScript after Node's type stripping; uPlot comes from node_modules and the streaming
// session from the browser client (streaming-app/client/). Every answer
// carries a strict Content-Security-Policy: scripts, styles and API calls from this origin only, no
// inline code, no framing, so a function name or log line that looks like HTML can never run.
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire, stripTypeScriptTypes } from 'node:module';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Problem } from '../domain/problem.ts';
import { writeProblem } from '../http/problem-response.ts';

export const CONSOLE_PATH = '/console/';
export const CONSOLE_DIR = fileURLToPath(new URL('../../console/', import.meta.url));
const UPLOT_DIR = join(dirname(createRequire(import.meta.url).resolve('uplot')), sep);
const STREAM_CLIENT_DIR = fileURLToPath(new URL('../../../streaming-app/client/', import.meta.url));

/** Files the console is made of from outside its folder: uPlot, and the streaming client's session modules. */
const BORROWED: Record<string, string> = {
  'vendor/uplot.js': join(UPLOT_DIR, 'uPlot.esm.js'),
  'vendor/uplot.css': join(UPLOT_DIR, 'uPlot.min.css'),
  'stream/stream-client.ts': join(STREAM_CLIENT_DIR, 'stream-client.ts'),
  'stream/picture-hold.ts': join(STREAM_CLIENT_DIR, 'picture-hold.ts'),
  'stream/protocol.ts': join(STREAM_CLIENT_DIR, 'protocol.ts'),
};

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.ts': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
  "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS = {
  'content-security-policy': CONTENT_SECURITY_POLICY,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** `api` with the console in front of it: /console and /console/… are the console's, the rest the API's. */
export function withConsole(api: Handler, root = CONSOLE_DIR): Handler {
  const cache = new Map<string, { body: Buffer; etag: string }>();
  const load = async (file: string) => {
    const hit = cache.get(file);
    if (hit) return hit;
    let body: Buffer = await readFile(file);
    if (file.endsWith('.ts')) body = Buffer.from(stripTypeScriptTypes(body.toString('utf8'), { mode: 'strip' }));
    const entry = { body, etag: `"${body.length.toString(36)}-${hash(body)}"` };
    cache.set(file, entry);
    return entry;
  };

  return (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    // Other methods stay the API's (its 404, or the streaming sign-in, which lives on any path).
    const ours = (path === '/console' || path.startsWith(CONSOLE_PATH)) && (req.method === 'GET' || req.method === 'HEAD');
    if (!ours) return api(req, res);
    if (path === '/console') {
      res.writeHead(301, { location: CONSOLE_PATH, 'content-length': 0 });
      return void res.end();
    }
    const file = fileFor(root, path.slice(CONSOLE_PATH.length));
    if (!file) return refuse(req, res, new Problem('not-found', `No console file ${path}`));
    load(file).then((entry) => {
      if (req.headers['if-none-match'] === entry.etag) {
        res.writeHead(304, { etag: entry.etag, ...SECURITY_HEADERS });
        return void res.end();
      }
      res.writeHead(200, { 'content-type': TYPES[extname(file)], 'content-length': entry.body.length, etag: entry.etag, ...SECURITY_HEADERS });
      res.end(req.method === 'HEAD' ? undefined : entry.body);
    }, () => refuse(req, res, new Problem('not-found', `No console file ${path}`)));
  };
}

/** The file a console path names: a borrowed file, or a known type inside the console folder (no dotfiles, no type declarations). */
function fileFor(root: string, relative: string): string | undefined {
  let name: string;
  try {
    name = decodeURIComponent(relative) || 'index.html';
  } catch {
    return undefined;
  }
  if (BORROWED[name]) return BORROWED[name];
  const file = normalize(join(root, name));
  const inside = file.startsWith(root.endsWith(sep) ? root : root + sep);
  if (!inside || !TYPES[extname(file)] || name.endsWith('.d.ts') || name.split('/').some((part) => part.startsWith('.'))) return undefined;
  return file;
}

function refuse(req: IncomingMessage, res: ServerResponse, problem: Problem) {
  writeProblem(res, problem, req.url ?? '/', randomUUID());
}

function hash(body: Buffer): string {
  let h = 0;
  for (let i = 0; i < body.length; i++) h = (h * 31 + body[i]) | 0;
  return (h >>> 0).toString(36);
}
