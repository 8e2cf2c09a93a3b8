// A task's result files, from the agent's side: what is under SVC_RESULTS_DIR, and their upload to the
// control plane. Each file is one PUT <server>/v1/agents/tasks/<taskId>/results?name=<path below the
// results dir> with the file as the body, bearer = the cluster's agent credential (the same credential the
// agent link uses), Host = the api host. The control plane streams it into its results store, so a large
// file never sits in memory on either side. A PUT of the same name again replaces it, so a retried upload
// is harmless. The results dir is the task's to write: it is walked and each file opened through
// safe-fs.ts, so a link or a swap can never make the agent upload a file from elsewhere on its host.
import type { FileHandle } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import { z } from 'zod';
import { TASK_RESULT_UPLOAD_PATH } from './protocol.ts';
import { listDir, openDirBeneath, openRegularBeneath } from './safe-fs.ts';

export interface ResultFile {
  /** Path below the results dir, '/'-separated. */
  name: string;
  /** The results dir. */
  dir: string;
}

export interface ResultUploader {
  upload(taskId: string, result: ResultFile): Promise<void>;
}

/** The control plane refused the file (4xx): retrying will not help. */
export class UploadRefused extends Error {
  override name = 'UploadRefused';
}

/** At most this many files per task are uploaded; more is a failure of the task, named in its report. */
export const MAX_RESULT_FILES = 1000;

/** Regular files under `dir`, depth first, names sorted; links are skipped (never followed out of the dir). */
export async function listResultFiles(dir: string): Promise<ResultFile[]> {
  const found: ResultFile[] = [];
  async function walk(names: string[]): Promise<void> {
    let handle: FileHandle;
    try {
      handle = await openDirBeneath(dir, names);
    } catch {
      return; // removed, or not a directory any more: nothing to upload there
    }
    try {
      for (const entry of (await listDir(handle)).sort((a, b) => a.name.localeCompare(b.name))) {
        const path = [...names, entry.name];
        if (entry.isDirectory()) await walk(path);
        else if (entry.isFile()) found.push({ name: path.join('/'), dir });
        if (found.length > MAX_RESULT_FILES) return;
      }
    } finally {
      await handle.close();
    }
  }
  await walk([]);
  return found;
}

export interface HttpUploaderOptions {
  server: string;
  credential: string;
  /** Host header (api.<gateway address>); also the TLS server name. */
  apiHost?: string;
  ca?: string | Buffer;
  timeoutMs?: number;
}

export function httpResultUploader(options: HttpUploaderOptions): ResultUploader {
  return {
    async upload(taskId, result) {
      const opened = await openRegularBeneath(result.dir, result.name.split('/'));
      if (!opened) throw new UploadRefused(`${result.name} is no longer a regular file in the results directory`);
      const { file, stats } = opened;
      const url = new URL(TASK_RESULT_UPLOAD_PATH.replace('{taskId}', encodeURIComponent(taskId)), options.server);
      url.searchParams.set('name', result.name);
      const headers: Record<string, string | number> = {
        authorization: `Bearer ${options.credential}`, 'content-type': 'application/octet-stream', 'content-length': stats.size,
      };
      if (options.apiHost) headers.host = options.apiHost;
      const transport = url.protocol === 'https:' ? https : http;
      return new Promise<void>((resolve, reject) => {
        const request = transport.request(url, {
          method: 'PUT', headers, ca: options.ca, servername: options.apiHost?.replace(/:\d+$/, ''), timeout: options.timeoutMs ?? 60_000,
        }, (response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => {
            const status = response.statusCode ?? 0;
            if (status >= 200 && status < 300) return resolve();
            const detail = describe(Buffer.concat(chunks).toString('utf8'));
            const error = `upload of ${result.name} answered ${status}${detail ? `: ${detail}` : ''}`;
            reject(status >= 400 && status < 500 && status !== 408 && status !== 429 ? new UploadRefused(error) : new Error(error));
          });
          response.on('error', reject);
        });
        request.on('timeout', () => request.destroy(new Error(`upload of ${result.name} timed out`)));
        request.on('error', reject);
        if (!stats.size) return request.end();
        // As many bytes as announced, whatever the task does to the file meanwhile.
        const body = file.createReadStream({ start: 0, end: stats.size - 1, autoClose: false });
        body.on('error', (error) => request.destroy(error));
        body.pipe(request);
      }).finally(() => file.close());
    },
  };
}

const problemDetail = z.object({ detail: z.string() });

/** The control plane's problem detail, or the start of whatever else it answered. */
function describe(text: string): string {
  try {
    return problemDetail.safeParse(JSON.parse(text)).data?.detail.slice(0, 300) ?? '';
  } catch {
    return text.slice(0, 120);
  }
}
