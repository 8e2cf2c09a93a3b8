// deploy/kubernetes, on paper: every manifest the kustomization lists parses, each object has the shape
// Kubernetes requires of its kind (the fields these manifests use, checked with zod), selectors match their
// pod labels, Services select a workload and name its ports, every image is one `npm run images` builds,
// the platform's environment is settings config.ts knows and accepts, and what docs/scale-out.md promises
// holds (N API replicas electing placement, rolled one at a time, on NATS over TLS with a user from a
// Secret, agents and the proxy reaching any replica, no engine socket in the platform, the agent on GPU nodes
// advertising the node's address, no secret on a command line). `kubectl kustomize` renders the base when kubectl is installed (Debian package
// kubernetes-client; required under CI). No cluster is involved: there is none here.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { envSettings, loadConfig } from '../api/src/config.ts';
import { kustomize, needsKubectl, parseObjects, type EnvVar, type K8sObject, type Workload } from './helpers/kubernetes.ts';

const DIR = path.resolve(import.meta.dirname, '../deploy/kubernetes');
const IMAGES = ['platform', 'proxy'].map((name) => `localhost/svc/${name}:dev`).concat('localhost/svc/coturn:4.6');

const kustomization = parseAllDocuments(readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8'))[0].toJS() as { resources: string[]; namespace: string };
const objects: K8sObject[] = kustomization.resources.flatMap((file) => parseObjects(readFileSync(path.join(DIR, file), 'utf8'), file));
const workloads = objects.filter((object): object is Workload => object.kind === 'Deployment' || object.kind === 'DaemonSet');
const named = (kind: string, wanted: string) => objects.find((object) => object.kind === kind && object.metadata.name === wanted);
const configMap = (wanted: string) => (named('ConfigMap', wanted) as Extract<K8sObject, { kind: 'ConfigMap' }> | undefined)?.data;
const selects = (service: K8sObject, workload: Workload) => service.kind === 'Service'
  && Object.entries(service.spec.selector).every(([key, value]) => workload.spec.template.metadata.labels[key] === value);
const platformImage = (workload: Workload) => workload.spec.template.spec.containers[0].image === 'localhost/svc/platform:dev';

/** The first container's environment: its ConfigMaps' entries (envFrom), then its own variables. */
function envOf(workload: Workload): Map<string, EnvVar> {
  const [container] = workload.spec.template.spec.containers;
  const fromMaps = (container.envFrom ?? []).flatMap((source) => Object.entries(configMap(source.configMapRef.name) ?? {}))
    .map(([key, value]) => [key, { name: key, value }] as const);
  return new Map([...fromMaps, ...(container.env ?? []).map((env) => [env.name, env] as const)]);
}

/** The settings a platform-image workload starts with: its environment, Secret values made up, node fields faked. */
function settingsOf(workload: Workload) {
  const made: Record<string, string> = {
    SVC_DATABASE_URL: 'postgres://svc@db.example/svc', SVC_SECRETS_KEY: randomBytes(32).toString('base64'),
    SVC_TURN_SECRET: randomBytes(16).toString('hex'), SVC_AGENT_CREDENTIAL: 'svcagent-made-up',
    SVC_NATS_USER: 'svc', SVC_NATS_PASSWORD: randomBytes(16).toString('hex'),
  };
  const env = Object.fromEntries([...envOf(workload)].map(([key, variable]) =>
    [key, variable.value ?? made[key] ?? (variable.valueFrom && 'fieldRef' in variable.valueFrom ? '10.0.0.7' : undefined)]));
  for (const key of Object.keys(env)) assert.ok(key in envSettings, `${workload.metadata.name}: ${key} is no setting of api/src/config.ts`);
  return loadConfig(env);
}

describe('deploy/kubernetes', () => {
  test('every object has its kind\'s shape; selectors match their pods; volumes and ports are the ones declared', () => {
    assert.deepEqual(objects.map((object) => object.kind).sort(),
      ['ConfigMap', 'ConfigMap', 'DaemonSet', 'DaemonSet', 'Deployment', 'Deployment', 'Ingress', 'Namespace', 'PersistentVolumeClaim', 'Service', 'Service']);
    assert.ok(named('Namespace', kustomization.namespace), 'the namespace the kustomization puts everything in');
    for (const workload of workloads) {
      const pod = workload.spec.template;
      for (const [key, value] of Object.entries(workload.spec.selector.matchLabels)) assert.equal(pod.metadata.labels[key], value, `${workload.metadata.name} selects its pods`);
      const volumes = new Set(pod.spec.volumes?.map((volume) => volume.name));
      for (const container of pod.spec.containers) {
        assert.ok(IMAGES.includes(container.image), `${container.image} is built by npm run images`);
        for (const mount of container.volumeMounts ?? []) assert.ok(volumes.has(mount.name), `${workload.metadata.name} mounts a declared volume`);
        const ports = new Set(container.ports?.map((port) => port.name));
        for (const probe of [container.readinessProbe, container.livenessProbe]) {
          const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port;
          if (typeof port === 'string') assert.ok(ports.has(port), `${workload.metadata.name} probes a named port`);
        }
      }
    }
  });

  test('each Service selects a workload and targets a port its pods name; every referenced ConfigMap exists', () => {
    for (const service of objects.filter((object) => object.kind === 'Service')) {
      const targets = workloads.filter((workload) => selects(service, workload));
      assert.ok(targets.length, `${service.metadata.name} selects a workload`);
      for (const target of targets) {
        const ports = new Set(target.spec.template.spec.containers.flatMap((container) => container.ports?.map((port) => port.name) ?? []));
        for (const port of service.spec.ports) assert.ok(typeof port.targetPort === 'number' || ports.has(port.targetPort), `${service.metadata.name} → ${port.targetPort}`);
      }
    }
    for (const workload of workloads) {
      for (const source of workload.spec.template.spec.containers.flatMap((container) => container.envFrom ?? [])) {
        assert.ok(configMap(source.configMapRef.name), `${workload.metadata.name}: ConfigMap ${source.configMapRef.name}`);
      }
      for (const env of envOf(workload).values()) {
        const ref = env.valueFrom && 'configMapKeyRef' in env.valueFrom ? env.valueFrom.configMapKeyRef : undefined;
        if (ref) assert.ok(configMap(ref.name)?.[ref.key] !== undefined, `${ref.name}.${ref.key}`);
      }
    }
  });

  test('the platform: N API replicas electing placement, rolled one at a time, on PostgreSQL and NATS (TLS, credentials from a Secret), settings config.ts accepts; no engine socket, no instances', () => {
    const api = named('Deployment', 'svc-api') as Workload & { kind: 'Deployment' };
    assert.ok(api.spec.replicas >= 2);
    assert.equal(api.spec.strategy?.type, 'RollingUpdate', 'a rollout keeps replicas up: placement moves to one of them');
    assert.deepEqual(workloads.filter((workload) => workload.kind === 'Deployment' && platformImage(workload)).map((workload) => workload.metadata.name), ['svc-api'], 'one kind of replica');
    for (const workload of [api]) {
      const config = settingsOf(workload);
      assert.equal(config.compute.placement, 'elected', workload.metadata.name);
      assert.ok(config.invocation.natsUrl && config.store.databaseUrl, `${workload.metadata.name} shares the queue and the store`);
      assert.match(config.invocation.natsUrl, /^tls:\/\//, `${workload.metadata.name} speaks TLS to NATS`);
      const env = envOf(workload);
      for (const name of ['SVC_NATS_USER', 'SVC_NATS_PASSWORD']) {
        assert.ok(env.get(name)?.valueFrom && 'secretKeyRef' in env.get(name)!.valueFrom!, `${workload.metadata.name}: ${name} from a Secret`);
      }
      const mounts = workload.spec.template.spec.containers[0].volumeMounts ?? [];
      assert.ok(mounts.some((mount) => config.invocation.natsTlsCaFile?.startsWith(`${mount.mountPath}/`)), `${workload.metadata.name} mounts the NATS CA it names`);
      assert.equal(config.compute.inProcessAgent, false);
      assert.equal(config.compute.localCluster.enabled, false);
      assert.ok(!workload.spec.template.spec.volumes?.some((volume) => volume.hostPath), 'no host paths');
      const [container] = workload.spec.template.spec.containers;
      for (const probe of [container.readinessProbe, container.livenessProbe]) {
        assert.deepEqual(probe?.httpGet?.httpHeaders, [{ name: 'Host', value: `api.${config.gateway.address}` }]);
      }
    }
    const service = (wanted: string) => named('Service', wanted)!;
    assert.deepEqual(workloads.filter((workload) => selects(service('svc-platform'), workload)).map((workload) => workload.metadata.name), ['svc-api']);
  });

  test('the replicas share one admin signing key (a Secret) and one blob store (a ReadWriteMany claim); an Ingress brings API clients to any of them', () => {
    const replicas = ['svc-api'].map((wanted) => named('Deployment', wanted) as Workload);
    for (const workload of replicas) {
      const config = settingsOf(workload);
      const mounted = (file: string) => {
        const mount = workload.spec.template.spec.containers[0].volumeMounts?.find((candidate) => file === candidate.mountPath || file.startsWith(`${candidate.mountPath}/`));
        return workload.spec.template.spec.volumes?.find((volume) => volume.name === mount?.name);
      };
      assert.equal(mounted(config.admin.signingKeyFile!)?.secret?.secretName, 'svc-admin-signing-key', `${workload.metadata.name}: the admin key from the Secret`);
      assert.equal(mounted(config.admin.signingKeyFile!)?.secret?.defaultMode, 0o400);
      assert.equal(mounted(config.assets.dir!)?.persistentVolumeClaim?.claimName, 'svc-blobs', `${workload.metadata.name}: the shared blob store`);
    }
    const claim = named('PersistentVolumeClaim', 'svc-blobs') as Extract<K8sObject, { kind: 'PersistentVolumeClaim' }>;
    assert.deepEqual(claim.spec.accessModes, ['ReadWriteMany'], 'every replica mounts it at once');
    const ingress = named('Ingress', 'svc-platform') as Extract<K8sObject, { kind: 'Ingress' }>;
    const address = settingsOf(replicas[0]).gateway.address;
    assert.deepEqual(ingress.spec.rules.map((rule) => rule.host), [`api.${address}`, `api-keys.${address}`, `*.invocation.${address}`]);
    for (const rule of ingress.spec.rules) {
      assert.deepEqual(rule.http.paths.map((item) => item.backend.service), [{ name: 'svc-platform', port: { name: 'gateway' } }]);
    }
    assert.deepEqual(ingress.spec.tls?.[0].hosts, ingress.spec.rules.map((rule) => rule.host));
  });

  test('agents and the streaming proxy reach the replicas\' Service (any replica takes an agent link and relays it to placement)', () => {
    const agent = settingsOf(named('DaemonSet', 'svc-agent') as Workload);
    assert.equal(new URL(agent.compute.agent.server!).hostname, `svc-platform.${kustomization.namespace}.svc.cluster.local`);
    const proxy = envOf(named('Deployment', 'svc-proxy') as Workload);
    assert.equal(new URL(proxy.get('SVC_SERVER')!.value!).hostname, 'svc-platform');
  });

  test('no secret is on a command line: no argument expands a variable taken from a Secret', () => {
    for (const workload of workloads) {
      const fromSecrets = [...envOf(workload).values()].filter((env) => env.valueFrom && 'secretKeyRef' in env.valueFrom).map((env) => env.name);
      for (const arg of workload.spec.template.spec.containers.flatMap((container) => container.args ?? [])) {
        for (const variable of fromSecrets) assert.ok(!arg.includes(`$(${variable})`), `${workload.metadata.name}: ${arg}`);
      }
    }
  });

  test('kubectl kustomize renders the base: the same objects, each of its kind\'s shape, all in the namespace', { skip: needsKubectl('the kustomize rendering of deploy/kubernetes') }, () => {
    const rendered = kustomize(DIR);
    const id = (object: K8sObject) => `${object.kind}/${object.metadata.name}`;
    assert.deepEqual(rendered.map(id).sort(), objects.map(id).sort());
    for (const object of rendered) assert.equal(object.metadata.namespace, object.kind === 'Namespace' ? undefined : kustomization.namespace, id(object));
  });

  test('the agent runs on GPU nodes on the host network, advertises the node\'s address and uses its engine', () => {
    const agent = named('DaemonSet', 'svc-agent') as Workload;
    const pod = agent.spec.template.spec;
    assert.equal(pod.hostNetwork, true);
    assert.deepEqual(pod.containers[0].securityContext, { runAsUser: 0, capabilities: { add: ['NET_ADMIN'] } }, 'root for the engine\'s socket, NET_ADMIN for its nftables table');
    assert.equal(pod.nodeSelector?.['nvidia.com/gpu.present'], 'true');
    const env = envOf(agent);
    assert.deepEqual(env.get('SVC_AGENT_ADVERTISE_HOST')?.valueFrom, { fieldRef: { fieldPath: 'status.hostIP' } });
    assert.equal(env.get('SVC_AGENT_RUNTIME')?.value, 'docker');
    const state = env.get('SVC_AGENT_STATE_DIR')?.value;
    assert.ok(pod.volumes?.some((volume) => volume.hostPath?.path === state), 'the state dir is the node\'s own path');
    assert.ok(pod.containers[0].volumeMounts?.some((mount) => mount.mountPath === state), '…mounted at the same path');
  });
});
