// A real container engine for tests: podman's Docker-compatible API on a socket of the test's own
// (`podman system service`), with the project's containers.conf (runc, cgroupfs, no default ulimits), or
// another OCI runtime (runsc), and the images `npm run images` builds. In CI podman, the images and the
// subordinate ids of per-container user namespaces must be there; elsewhere their absence skips the test
// with one printed line saying what to install.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { firewallTable } from '../../src/compute/runtimes/docker-firewall.ts';
import { agentTag } from '../../src/compute/runtimes/docker-network.ts';

export const CONTAINERS_CONF = fileURLToPath(new URL('../../../images/containers.conf', import.meta.url));
/** What `npm run images` tags the project's images with. */
export const IMAGE_TAG = process.env.SVC_IMAGE_TAG ?? 'dev';
export const image = (name: string) => `localhost/svc/${name}:${IMAGE_TAG}`;

const INSTALL = 'Debian packages podman runc debootstrap, then npm run images';

/** Why a test needing podman and these images is skipped, or false. Under CI it always runs (and fails without them). */
export function needsPodman(images: string[], what: string): string | false {
  if (process.env.CI) return false;
  let reason: string | undefined;
  if (!existsSync('/usr/bin/podman') || !existsSync('/usr/sbin/runc')) reason = `needs podman and runc (${INSTALL})`;
  else if (process.getuid?.() !== 0) reason = 'needs root for podman here (rootless podman is not set up)';
  else if (!subordinateIds()) reason = 'needs "containers:2147483647:2147483648" in /etc/subuid and /etc/subgid (user namespaces, docs/containers.md)';
  else {
    const missing = images.filter((name) => !imageExists(name));
    if (missing.length) reason = `needs the images ${missing.join(', ')} (npm run images)`;
  }
  if (reason) console.log(`# skipping ${what}: ${reason}`);
  return reason ?? false;
}

/** Whether podman's `--userns=auto` has ranges to take from (the `containers` entries). */
function subordinateIds(): boolean {
  return ['/etc/subuid', '/etc/subgid'].every((file) => {
    try {
      return /^containers:\d+:\d+$/m.test(readFileSync(file, 'utf8'));
    } catch {
      return false;
    }
  });
}

function imageExists(name: string): boolean {
  try {
    execFileSync('podman', ['image', 'exists', name], { env: podmanEnv(), stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export function podmanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { ...process.env, CONTAINERS_CONF: process.env.CONTAINERS_CONF ?? CONTAINERS_CONF, ...extra };
}

export interface Engine {
  socketPath: string;
  /** DOCKER_HOST for clients of this engine. */
  dockerHost: string;
  /** Calls the engine's API (Docker-compatible paths, no version prefix). */
  call(method: string, apiPath: string, body?: unknown): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

export interface EngineOptions {
  /** Registries (host:port) the engine may talk to over plain HTTP. */
  insecureRegistries?: string[];
  /** The engine's OCI runtime instead of runc: its name, and the command line it runs as (a wrapper script). */
  runtime?: { name: string; command: string[] };
}

/** Starts `podman system service` on a socket in a fresh temporary directory and waits until it answers. */
export async function startEngine(options: EngineOptions = {}): Promise<Engine> {
  const dir = await mkdtemp(path.join(tmpdir(), 'svc-podman-'));
  const socketPath = path.join(dir, 'podman.sock');
  const env = podmanEnv();
  if (options.insecureRegistries?.length) {
    const registries = path.join(dir, 'registries.conf');
    await writeFile(registries, options.insecureRegistries
      .map((location) => `[[registry]]\nlocation = "${location}"\ninsecure = true\n`).join('\n'));
    env.CONTAINERS_REGISTRIES_CONF = registries;
  }
  if (options.runtime) env.CONTAINERS_CONF = await runtimeConf(dir, env.CONTAINERS_CONF!, options.runtime);
  // In its own directory: conmon leaves a file named `oom` in its working directory when a container is
  // killed for memory, which was the checkout.
  const service = spawn('podman', ['system', 'service', '--time=0', `unix://${socketPath}`], { cwd: dir, env, stdio: ['ignore', 'ignore', 'pipe'] });
  let errors = '';
  service.stderr.setEncoding('utf8').on('data', (chunk: string) => { errors = (errors + chunk).slice(-4000); });
  const exited = once(service, 'exit');
  const engine: Engine = {
    socketPath,
    dockerHost: `unix://${socketPath}`,
    call: (method, apiPath, body) => engineCall(socketPath, method, apiPath, body),
    async close() {
      if (service.exitCode === null) {
        service.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
  for (let attempt = 0; ; attempt++) {
    if (service.exitCode !== null) throw new Error(`podman system service exited: ${errors.trim()}`);
    if ((await engine.call('GET', '/_ping').catch(() => undefined))?.status === 200) return engine;
    if (attempt === 200) {
      await engine.close();
      throw new Error(`podman system service did not answer on ${socketPath}: ${errors.trim()}`);
    }
    await sleep(50);
  }
}

/** A copy of `base` whose default runtime is `runtime`, run through a wrapper script in `dir`. */
async function runtimeConf(dir: string, base: string, runtime: { name: string; command: string[] }): Promise<string> {
  const wrapper = path.join(dir, runtime.name);
  await writeFile(wrapper, `#!/bin/sh\nexec ${runtime.command.join(' ')} "$@"\n`, { mode: 0o755 });
  const conf = path.join(dir, 'containers.conf');
  const text = (await readFile(base, 'utf8')).replace(/^runtime = .*$/m, `runtime = "${runtime.name}"`);
  await writeFile(conf, `${text}\n[engine.runtimes]\n${runtime.name} = ["${wrapper}"]\n`);
  return conf;
}

function engineCall(socketPath: string, method: string, apiPath: string, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const request = http.request({ socketPath, method, path: `/v1.41${apiPath}`, headers: body ? { 'content-type': 'application/json' } : {} }, async (response) => {
      let text = '';
      for await (const chunk of response) text += chunk;
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        // not JSON
      }
      resolve({ status: response.statusCode!, body: parsed });
    });
    request.on('error', reject);
    request.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** Containers carrying a label (e.g. svc.agent=<name>), running or not. */
export async function containersLabelled(engine: Engine, label: string): Promise<any[]> {
  const filters = encodeURIComponent(JSON.stringify({ label: [label] }));
  return (await engine.call('GET', `/containers/json?all=true&filters=${filters}`)).body;
}

/** Removes every container carrying the label (a test's leftovers). */
export async function removeContainers(engine: Engine, label: string): Promise<void> {
  for (const container of await containersLabelled(engine, label)) {
    await engine.call('DELETE', `/containers/${container.Id}?force=true`);
  }
}

/** Removes what an agent's docker runtime leaves on the host: its containers, account networks and firewall table. */
export async function removeAgentLeftovers(engine: Engine, agentName: string): Promise<void> {
  await removeContainers(engine, `svc.agent=${agentName}`);
  const filters = encodeURIComponent(JSON.stringify({ label: [`svc.agent=${agentName}`] }));
  for (const network of (await engine.call('GET', `/networks?filters=${filters}`)).body) {
    await engine.call('DELETE', `/networks/${network.Id}`);
  }
  try {
    execFileSync('nft', ['delete', 'table', 'inet', firewallTable(agentTag(agentName))], { stdio: 'ignore' });
  } catch {
    // never made (dockerNetwork: engine, or no instance started)
  }
}
