// Where the platform keeps files: task results, input assets, large results. One small interface; the
// embedded default keeps them in a directory under the data dir. An S3-compatible store would implement
// the same calls (not written yet: see docs/api.md).
//
// Keys are '/'-separated paths built by the services (e.g. <ncaId>/<prefix>/<taskId>/<name>); each segment
// is checked here again so that no key can leave the root.
import { createHash, randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Problem } from '../domain/problem.ts';
import { ensurePrivateDir } from './store.ts';

export interface StoredBlob {
  size: number;
  sha256: string;
}

export interface BlobStore {
  readonly name: string;
  /** Streams `body` into `key`, replacing what was there; a 413 Problem past maxBytes (nothing kept). */
  put(key: string, body: Readable, maxBytes: number): Promise<StoredBlob>;
  /** The bytes of `key`, or undefined when there are none. */
  get(key: string): Promise<{ body: Readable; size: number } | undefined>;
  /** Removes `prefix` and every key under it (a task's results when it is deleted, one asset). */
  deletePrefix(prefix: string): Promise<void>;
  /** Removes the keys directly under `prefix` written before `cutoff` (ms since epoch). */
  sweep(prefix: string, cutoff: number): Promise<void>;
}

/** True when every segment of a '/'-separated key is a plain name. */
export function isSafeKey(key: string): boolean {
  const segments = key.split('/');
  return segments.length > 0 && segments.every((segment) => segment !== '' && segment !== '.' && segment !== '..'
    && !segment.includes('\\') && !segment.includes('\0'));
}

/** The blob store in the directory `root`: made or tightened to 0700 here; every file in it is 0600. */
export function createLocalBlobStore(root: string): BlobStore {
  ensurePrivateDir(root);
  const incoming = path.join(root, '.incoming');
  const fileOf = (key: string) => {
    if (!isSafeKey(key)) throw new Error(`unsafe blob key ${JSON.stringify(key)}`);
    return path.join(root, ...key.split('/'));
  };

  return {
    name: 'local',

    async put(key, body, maxBytes) {
      const target = fileOf(key);
      await mkdir(incoming, { recursive: true, mode: 0o700 });
      const temporary = path.join(incoming, randomUUID());
      const hash = createHash('sha256');
      let size = 0;
      const meter = new Transform({
        transform(chunk: Buffer, _encoding, done) {
          size += chunk.length;
          if (size > maxBytes) return done(new Problem('payload-too-large', `A file here may hold at most ${maxBytes} bytes`));
          hash.update(chunk);
          done(null, chunk);
        },
      });
      try {
        await pipeline(body, meter, createWriteStream(temporary, { mode: 0o600 }));
        await mkdir(path.dirname(target), { recursive: true, mode: 0o700 });
        await rename(temporary, target);
      } catch (error) {
        await rm(temporary, { force: true });
        throw error;
      }
      return { size, sha256: hash.digest('hex') };
    },

    async get(key) {
      const file = fileOf(key);
      const info = await stat(file).catch(() => undefined);
      if (!info?.isFile()) return undefined;
      return { body: createReadStream(file), size: info.size };
    },

    async deletePrefix(prefix) {
      await rm(fileOf(prefix), { recursive: true, force: true });
    },

    async sweep(prefix, cutoff) {
      const dir = fileOf(prefix);
      const names = await readdir(dir).catch(() => [] as string[]);
      for (const name of names) {
        const file = path.join(dir, name);
        const info = await stat(file).catch(() => undefined);
        if (info?.isFile() && info.mtimeMs < cutoff) await rm(file, { force: true });
      }
    },
  };
}
