// Runs `svc serve` as its own process (benchmarks, and tests that kill the platform): the load
// generator and the platform do not share an event loop, and a kill -9 is a real one.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { ADMIN_ISSUER, loadAdminKey, signJwt } from '../../src/control/keys/signing.ts';
import { tempDir, type TestDatabase } from './databases.ts';
import { request } from './http.ts';
import { TEST_CATALOG } from './platform.ts';

const svcBin = path.resolve(import.meta.dirname, '../../bin/svc.js');
const execFileAsync = promisify(execFile);

export interface ServedPlatform {
  url: string;
  dataDir: string;
  port: number;
  bootstrapSecret: string;
  readonly process: ChildProcess;
  /** An account-administration token signed with the installation's admin key (it also mints management tokens). */
  adminToken(): Promise<string>;
  /** A management token and an opaque key with `scopes`. */
  credentials(scopes: string[]): Promise<{ token: string; apiKey: string }>;
  /** SIGKILL: no shutdown of any kind. */
  kill9(): Promise<void>;
  /** Starts `svc serve` again on the same data directory and port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export interface ServeOptions {
  /**
   * argv prefix the platform runs under, e.g. `ip netns exec <ns>` (it must exec the command). svc serve
   * re-execs itself to add its V8 flags (process/guard.ts): a wrapper that does not follow an exec, such as
   * valgrind without --trace-children, is left behind.
   */
  wrap?: string[];
  /** The address the test reaches the platform at (default localhost). */
  address?: string;
  /** Another API replica on an existing installation's store (it prints no bootstrap secret). */
  replica?: boolean;
  /** More arguments after `svc serve`, e.g. --samples. */
  args?: string[];
}

export async function servePlatform(env: NodeJS.ProcessEnv = {}, options: ServeOptions = {}): Promise<ServedPlatform> {
  const dataDir = env.SVC_DATA_DIR ?? mkdtempSync(path.join(os.tmpdir(), 'svc-served-'));
  // Output goes to a file, as a container runtime would take it; a pipe read by this (busy) process
  // would make the platform wait on the load generator.
  const outputFile = path.join(dataDir, 'output.log');

  async function start(port: number): Promise<{ child: ChildProcess; url: string; secret?: string }> {
    const offset = (() => {
      try {
        return readFileSync(outputFile).length;
      } catch {
        return 0;
      }
    })();
    const [command, ...args] = [...options.wrap ?? [], process.execPath, svcBin, 'serve', ...options.args ?? []];
    const child = spawn(command, args, {
      // As in platform.ts, the sandbox is off and there is no TURN server (the default port, 3478, may be
      // another process's) unless a test asks for them.
      env: { ...process.env, SVC_HOST: '127.0.0.1', SVC_AGENT_SANDBOX: 'off', SVC_TURN_SERVER: 'none', ...env, SVC_PORT: String(port), SVC_DATA_DIR: dataDir },
      stdio: ['ignore', openSync(outputFile, 'a'), 'inherit'],
    });
    let exited = false;
    child.once('exit', () => {
      exited = true;
    });
    for (;;) {
      if (exited) throw new Error(`svc serve exited: ${readFileSync(outputFile, 'utf8').slice(offset)}`);
      await sleep(50);
      const output = readFileSync(outputFile, 'utf8').slice(offset);
      const listening = /API\s+http:\/\/localhost:(\d+)/.exec(output)?.[1];
      if (listening) return { child, url: `http://${options.address ?? 'localhost'}:${listening}`, secret: /Bootstrap secret[^:]*: (svcboot-\S+)/.exec(output)?.[1] };
    }
  }

  const first = await start(Number(env.SVC_PORT ?? 0));
  // Off loopback the banner does not print it: `svc bootstrap secret` does, as an operator would ask.
  if (!first.secret && !options.replica) {
    const printed = await execFileAsync(process.execPath, [svcBin, 'bootstrap', 'secret'], { env: { ...process.env, ...env, SVC_DATA_DIR: dataDir } });
    first.secret = /^(svcboot-\S+)/.exec(printed.stdout)?.[1];
  }
  if (!first.secret && !options.replica) throw new Error('svc serve made no bootstrap secret: is the data directory new?');
  let child = first.child;
  const port = Number(new URL(first.url).port);
  const adminToken = async () => {
    const key = await loadAdminKey(path.join(dataDir, 'admin-signing-key.pem'), { create: false });
    return signJwt(key, { iss: ADMIN_ISSUER, aud: 'svc-api', sub: 'served' }, new Date(Date.now() + 86_400_000));
  };
  const stopped = (process: ChildProcess) => new Promise((resolve) => (process.exitCode !== null || process.signalCode ? resolve(undefined) : process.once('exit', resolve)));

  return {
    url: first.url,
    dataDir,
    port,
    bootstrapSecret: first.secret ?? '',
    get process() {
      return child;
    },
    adminToken,
    async credentials(scopes) {
      const token = (await request(first.url, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: await adminToken(), body: {} })).body.value;
      const key = await request(first.url, 'POST', '/v1/keys', {
        host: 'api-keys.localhost', bearer: token,
        headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'served' },
        body: { expires_at: new Date(Date.now() + 86_400_000).toISOString(), authorizations: { policies: [{ scopes }] } },
      });
      return { token, apiKey: key.body.value };
    },
    async kill9() {
      child.kill('SIGKILL');
      await stopped(child);
    },
    async restart() {
      child = (await start(port)).child;
    },
    async stop() {
      child.kill('SIGTERM');
      await stopped(child);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Two `svc serve` replicas of one installation on PostgreSQL (`database`) and NATS (`natsEnv`), sharing a
 * secrets key and a blob store: `placement` runs placement and the local cluster, `replica` only the API.
 * `env` goes to both, `replicaEnv` to the second only.
 */
export async function serveReplicaPair(database: TestDatabase, natsEnv: Record<string, string>, env: NodeJS.ProcessEnv = {}, replicaEnv: NodeJS.ProcessEnv = {}) {
  const shared = {
    ...natsEnv, SVC_DATABASE_URL: database.databaseUrl, SVC_SECRETS_KEY: randomBytes(32).toString('base64'),
    SVC_AGENT_IMAGE_CATALOG: TEST_CATALOG, SVC_LOG_LEVEL: 'warn', SVC_BLOB_DIR: path.join(tempDir(), 'blobs'), ...env,
  };
  const placement = await servePlatform(shared);
  const replica = await servePlatform({ ...shared, SVC_PLACEMENT: 'false', SVC_LOCAL_CLUSTER: 'false', ...replicaEnv }, { replica: true });
  return { placement, replica };
}
