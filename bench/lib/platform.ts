// Runs `svc serve` as its own process for a benchmark, so the load generator and the platform do not
// share an event loop.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import os from 'node:os';
import path from 'node:path';
import { request } from '../../api/test/helpers/http.ts';

const svcBin = path.resolve(import.meta.dirname, '../../api/bin/svc.js');

export interface ServedPlatform {
  url: string;
  dataDir: string;
  port: number;
  bootstrapSecret: string;
  process: ChildProcess;
  /** A management token and an opaque key with `scopes`. */
  credentials(scopes: string[]): Promise<{ token: string; apiKey: string }>;
  stop(): Promise<void>;
}

export async function servePlatform(env: NodeJS.ProcessEnv = {}): Promise<ServedPlatform> {
  const dataDir = env.SVC_DATA_DIR ?? mkdtempSync(path.join(os.tmpdir(), 'svc-bench-'));
  // Output goes to a file, as a container runtime would take it; a pipe read by this (busy) process
  // would make the platform wait on the load generator.
  const outputFile = path.join(dataDir, 'output.log');
  const child = spawn(process.execPath, [svcBin, 'serve'], {
    env: { ...process.env, SVC_PORT: '0', SVC_HOST: '127.0.0.1', ...env, SVC_DATA_DIR: dataDir },
    stdio: ['ignore', openSync(outputFile, 'w'), 'inherit'],
  });
  let exited = false;
  child.once('exit', () => { exited = true; });
  let url = '';
  let secret = '';
  while (!url || !secret) {
    if (exited) throw new Error(`svc serve exited: ${readFileSync(outputFile, 'utf8')}`);
    await sleep(50);
    const output = readFileSync(outputFile, 'utf8');
    url = /API\s+(http:\/\/localhost:\d+)/.exec(output)?.[1] ?? '';
    secret = /Bootstrap secret[^:]*: (svcboot-\S+)/.exec(output)?.[1] ?? '';
  }
  const port = Number(new URL(url).port);
  return {
    url,
    dataDir,
    port,
    bootstrapSecret: secret,
    process: child,
    async credentials(scopes) {
      const token = (await request(url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: secret, body: {} })).body.value;
      const key = await request(url, 'POST', '/v1/keys', {
        host: 'api-keys.localhost', bearer: token,
        headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'bench' },
        body: { expires_at: new Date(Date.now() + 86_400_000).toISOString(), authorizations: { policies: [{ scopes }] } },
      });
      return { token, apiKey: key.body.value };
    },
    async stop() {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
