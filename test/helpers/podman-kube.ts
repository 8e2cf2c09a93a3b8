// Kubernetes objects played by `podman kube play`: podman 4.3's (Debian 12's), the one version that plays a
// Deployment as its N replicas (from 4.4 on a Deployment is limited to one pod). It has gaps, each bridged
// here where the objects are handed over (docs/scale-out.md, "Under podman kube play"):
// - a Secret document is kept as YAML, but secretKeyRef reads a JSON map of base64 values, and a secret
//   volume writes the `data` values as they are, undecoded (both fixed in 4.4): the podman secrets are
//   made here, in the form each use reads;
// - a secret volume without `optional` crashes it (nil dereference; fixed in 4.4);
// - every containerPort is published on the host at the same number (fixed in 4.8): dropped, the pods are
//   reached at their own addresses;
// - the liveness probe becomes a healthcheck that curls port 0 (a named port) without its headers, restarting
//   the container on failure where systemd runs it: probes dropped, the test probes as the manifests declare;
// - an emptyDir is a volume named after it, shared by every pod using that name: renamed per run;
// - no DaemonSet kind: its pod template is played as a Pod.
// Services, Ingresses and Namespaces are skipped by kube play (no such objects in podman).
import { execFile, execFileSync } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { podmanEnv } from '../../api/test/helpers/podman.ts';
import type { K8sObject, Workload } from './kubernetes.ts';

const run = promisify(execFile);
type PodSpec = Workload['spec']['template']['spec'];
type Secret = Extract<K8sObject, { kind: 'Secret' }>;

/** Runs podman with the project's containers.conf. */
export async function podman(args: string[]): Promise<string> {
  return (await run('podman', args, { env: podmanEnv(), maxBuffer: 16 * 1024 * 1024 })).stdout;
}

/** Why a test needing podman 4.3's kube play cannot run here (one printed line), or false. Under CI it always runs. */
export function needsPodman43(what: string): string | false {
  if (process.env.CI) return false;
  const version = /^podman version (\d+\.\d+)\./.exec(safely(() => execFileSync('podman', ['--version'], { encoding: 'utf8' })) ?? '')?.[1];
  if (version === '4.3') return false;
  console.log(`# skipping ${what}: needs podman 4.3 (Debian 12's; from 4.4 kube play makes one pod of a Deployment), found ${version ?? 'none'}`);
  return 'needs podman 4.3';
}

function safely<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/**
 * The podman secrets for these Secrets, each in the form its use in `pods` reads under podman 4.3, through a
 * file in `dir` (private to the test) that is removed at once: podman 4.3 takes `-` only from a FIFO, and
 * Node's stdin pipes are sockets.
 */
export async function createSecrets(secrets: Secret[], pods: PodSpec[], dir: string): Promise<void> {
  const asVolume = new Set(pods.flatMap((pod) => pod.volumes?.flatMap((volume) => volume.secret?.secretName ?? []) ?? []));
  const asEnv = new Set(pods.flatMap((pod) => pod.containers.flatMap((container) => container.env?.flatMap((env) =>
    (env.valueFrom && 'secretKeyRef' in env.valueFrom ? env.valueFrom.secretKeyRef.name : [])) ?? [])));
  for (const secret of secrets) {
    const { name } = secret.metadata;
    if (asVolume.has(name) && asEnv.has(name)) throw new Error(`Secret ${name} is both a volume and variables: podman 4.3 reads the two from different forms`);
    if (!asVolume.has(name) && !asEnv.has(name)) continue;
    const decoded = Object.fromEntries(Object.entries(secret.data).map(([key, value]) => [key, Buffer.from(value, 'base64').toString('utf8')]));
    const file = path.join(dir, `secret-${name}.json`);
    await writeFile(file, JSON.stringify(asVolume.has(name) ? { data: decoded } : secret.data), { mode: 0o600 });
    try {
      await podman(['secret', 'create', name, file]);
    } finally {
      await rm(file, { force: true });
    }
  }
}

/** A workload's pod spec as podman 4.3 can run it, beside other runs: `tag` names its emptyDir volumes apart. */
function podSpecForPodman(spec: PodSpec, tag: string) {
  const emptyDirs = new Set(spec.volumes?.filter((volume) => volume.emptyDir).map((volume) => volume.name));
  const named = (volume: string) => (emptyDirs.has(volume) ? `${volume}-${tag}` : volume);
  return {
    ...spec,
    containers: spec.containers.map(({ ports: _ports, livenessProbe: _liveness, readinessProbe: _readiness, ...container }) => ({
      ...container, volumeMounts: container.volumeMounts?.map((mount) => ({ ...mount, name: named(mount.name) })),
    })),
    volumes: spec.volumes?.map((volume) => ({
      ...volume, name: named(volume.name), ...(volume.secret ? { secret: { ...volume.secret, optional: false } } : {}),
    })),
  };
}

/** The documents podman 4.3 plays for a workload: a Deployment as it is, a DaemonSet's template as a Pod. */
export function playable(workload: Workload, tag: string): Record<string, unknown> {
  const spec = podSpecForPodman(workload.spec.template.spec, tag);
  if (workload.kind === 'Deployment') {
    return { ...workload, spec: { ...workload.spec, template: { ...workload.spec.template, spec } } };
  }
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name: workload.metadata.name, labels: workload.spec.template.metadata.labels }, spec };
}

/** Writes the documents to `file` and plays them on `network` (a podman network, or host); `podman kube down file` ends them. */
export async function play(file: string, documents: unknown[], network: string): Promise<void> {
  await writeFile(file, documents.map((document) => stringify(document)).join('---\n'));
  // Always a network: without one, kube play makes (and leaves) podman-default-kube-network.
  await podman(['kube', 'play', '--network', network, file]);
}

export interface Tagged {
  pods: string[];
  containers: string[];
  volumes: string[];
  secrets: string[];
  networks: string[];
}

/** What podman holds whose name carries `tag`. */
export async function tagged(tag: string): Promise<Tagged> {
  const names = async (args: string[], field: string) =>
    (await podman([...args, '--format', `{{.${field}}}`])).split('\n').filter((name) => name.includes(tag));
  return {
    pods: await names(['pod', 'ps'], 'Name'),
    containers: await names(['ps', '--all'], 'Names'),
    volumes: await names(['volume', 'ls'], 'Name'),
    secrets: await names(['secret', 'ls'], 'Name'),
    networks: await names(['network', 'ls'], 'Name'),
  };
}

/** Ends what the played files made, then removes whatever still carries `tag`: pods, volumes, secrets, networks. */
export async function removeTagged(tag: string, playedFiles: string[]): Promise<void> {
  for (const file of playedFiles) await podman(['kube', 'down', file]).catch(() => undefined);
  const left = await tagged(tag);
  if (left.pods.length) await podman(['pod', 'rm', '--force', ...left.pods]).catch(() => undefined);
  if (left.volumes.length) await podman(['volume', 'rm', '--force', ...left.volumes]).catch(() => undefined);
  if (left.secrets.length) await podman(['secret', 'rm', ...left.secrets]).catch(() => undefined);
  if (left.networks.length) await podman(['network', 'rm', '--force', ...left.networks]).catch(() => undefined);
}

/** A bridge network of the test's own: its name, subnet and gateway (the host, as the pods see it). */
export async function createNetwork(name: string): Promise<{ name: string; subnet: string; gateway: string }> {
  await podman(['network', 'create', name]);
  const [subnet, gateway] = (await podman(['network', 'inspect', name, '--format', '{{(index .Subnets 0).Subnet}} {{(index .Subnets 0).Gateway}}'])).trim().split(' ');
  return { name, subnet, gateway };
}
