// deploy/kubernetes, on paper: every manifest the kustomization lists parses, each object has the shape
// Kubernetes requires of its kind (the fields these manifests use, checked with zod), selectors match their
// pod labels, Services select a workload and name its ports, every image is one `npm run images` builds,
// and what docs/scale-out.md promises holds (no engine socket in the platform, the agent on GPU nodes
// advertising the node's address). No cluster or kubectl is involved: there is none here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';

const DIR = path.resolve(import.meta.dirname, '../deploy/kubernetes');
const IMAGES = ['platform', 'proxy'].map((name) => `localhost/svc/${name}:dev`).concat('localhost/svc/coturn:4.6');

const name = z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/).max(253);
const labels = z.record(z.string().max(317), z.string().max(63));
const metadata = z.object({ name, labels: labels.optional() }).strict();
const portNumber = z.number().int().min(1).max(65535);
const portRef = z.union([portNumber, z.string().regex(/^[a-z0-9-]{1,15}$/)]);
const keyRef = z.object({ name, key: z.string().min(1) }).strict();
const envVar = z.object({
  name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/),
  value: z.string().optional(),
  valueFrom: z.union([
    z.object({ secretKeyRef: keyRef }).strict(), z.object({ configMapKeyRef: keyRef }).strict(),
    z.object({ fieldRef: z.object({ fieldPath: z.string() }).strict() }).strict(),
  ]).optional(),
}).strict().refine((env) => (env.value === undefined) !== (env.valueFrom === undefined), 'value or valueFrom');
const probe = z.object({
  httpGet: z.object({ path: z.string().startsWith('/'), port: portRef, httpHeaders: z.array(z.object({ name: z.string(), value: z.string() }).strict()).optional() }).strict().optional(),
  tcpSocket: z.object({ port: portRef }).strict().optional(),
  periodSeconds: z.number().int().min(1).optional(),
}).strict();
const container = z.object({
  name,
  image: z.string().min(1),
  args: z.array(z.string()).optional(),
  ports: z.array(z.object({ name: z.string().regex(/^[a-z0-9-]{1,15}$/), containerPort: portNumber, protocol: z.enum(['TCP', 'UDP']) }).strict()).optional(),
  env: z.array(envVar).optional(),
  readinessProbe: probe.optional(),
  livenessProbe: probe.optional(),
  resources: z.object({ requests: z.record(z.string(), z.string()).optional(), limits: z.record(z.string(), z.string()).optional() }).strict().optional(),
  securityContext: z.object({ runAsUser: z.number().int().min(0) }).strict().optional(),
  volumeMounts: z.array(z.object({ name, mountPath: z.string().startsWith('/'), readOnly: z.boolean().optional() }).strict()).optional(),
}).strict();
const volume = z.object({
  name,
  emptyDir: z.object({}).strict().optional(),
  secret: z.object({ secretName: name }).strict().optional(),
  hostPath: z.object({ path: z.string().startsWith('/'), type: z.enum(['Socket', 'DirectoryOrCreate', 'Directory']) }).strict().optional(),
}).strict();
const podTemplate = z.object({
  metadata: z.object({ labels }).strict(),
  spec: z.object({
    containers: z.array(container).min(1),
    volumes: z.array(volume).optional(),
    hostNetwork: z.boolean().optional(),
    dnsPolicy: z.enum(['ClusterFirst', 'ClusterFirstWithHostNet', 'Default']).optional(),
    nodeSelector: labels.optional(),
    securityContext: z.object({ runAsNonRoot: z.boolean(), runAsUser: z.number().int(), runAsGroup: z.number().int(), fsGroup: z.number().int().optional() }).strict().optional(),
  }).strict(),
}).strict();
const selector = z.object({ matchLabels: labels }).strict();
const objectSchema = z.discriminatedUnion('kind', [
  z.object({ apiVersion: z.literal('v1'), kind: z.literal('Namespace'), metadata }).strict(),
  z.object({ apiVersion: z.literal('v1'), kind: z.literal('ConfigMap'), metadata, data: z.record(z.string(), z.string()) }).strict(),
  z.object({
    apiVersion: z.literal('v1'), kind: z.literal('Service'), metadata,
    spec: z.object({
      type: z.enum(['ClusterIP', 'LoadBalancer', 'NodePort']).optional(), selector: labels,
      ports: z.array(z.object({ name: z.string(), port: portNumber, targetPort: portRef, protocol: z.enum(['TCP', 'UDP']) }).strict()).min(1),
    }).strict(),
  }).strict(),
  z.object({ apiVersion: z.literal('apps/v1'), kind: z.literal('Deployment'), metadata, spec: z.object({ replicas: z.number().int().min(0), selector, template: podTemplate }).strict() }).strict(),
  z.object({ apiVersion: z.literal('apps/v1'), kind: z.literal('DaemonSet'), metadata, spec: z.object({ selector, template: podTemplate }).strict() }).strict(),
]);
type K8sObject = z.infer<typeof objectSchema>;
type Workload = Extract<K8sObject, { kind: 'Deployment' | 'DaemonSet' }>;

const kustomization = parseAllDocuments(readFileSync(path.join(DIR, 'kustomization.yaml'), 'utf8'))[0].toJS() as { resources: string[]; namespace: string };
const objects: K8sObject[] = kustomization.resources.flatMap((file) =>
  parseAllDocuments(readFileSync(path.join(DIR, file), 'utf8')).map((document, index) => {
    const parsed = objectSchema.safeParse(document.toJS());
    assert.ok(parsed.success, `${file} #${index + 1}: ${parsed.error?.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
    return parsed.data;
  }));
const workloads = objects.filter((object): object is Workload => object.kind === 'Deployment' || object.kind === 'DaemonSet');
const named = (kind: string, wanted: string) => objects.find((object) => object.kind === kind && object.metadata.name === wanted);
const envOf = (workload: Workload) => new Map(workload.spec.template.spec.containers[0].env?.map((env) => [env.name, env]));

describe('deploy/kubernetes', () => {
  test('every object has its kind\'s shape; selectors match their pods; volumes and ports are the ones declared', () => {
    assert.deepEqual(objects.map((object) => object.kind).sort(), ['ConfigMap', 'ConfigMap', 'DaemonSet', 'DaemonSet', 'Deployment', 'Deployment', 'Namespace', 'Service', 'Service']);
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
      const target = workloads.find((workload) => Object.entries(service.spec.selector).every(([key, value]) => workload.spec.template.metadata.labels[key] === value));
      assert.ok(target, `${service.metadata.name} selects a workload`);
      const ports = new Set(target.spec.template.spec.containers.flatMap((container) => container.ports?.map((port) => port.name) ?? []));
      for (const port of service.spec.ports) assert.ok(typeof port.targetPort === 'number' || ports.has(port.targetPort), `${service.metadata.name} → ${port.targetPort}`);
    }
    for (const workload of workloads) {
      for (const env of envOf(workload).values()) {
        const ref = env.valueFrom && 'configMapKeyRef' in env.valueFrom ? env.valueFrom.configMapKeyRef : undefined;
        if (ref) assert.ok((named('ConfigMap', ref.name) as { data?: Record<string, string> } | undefined)?.data?.[ref.key] !== undefined, `${ref.name}.${ref.key}`);
      }
    }
  });

  test('the platform holds no engine socket and runs no instances; its probes name its api host', () => {
    const platform = named('Deployment', 'svc-platform') as Workload;
    const env = envOf(platform);
    assert.equal(env.get('SVC_IN_PROCESS_AGENT')?.value, 'false');
    assert.equal(env.get('SVC_LOCAL_CLUSTER')?.value, 'false');
    assert.ok(!platform.spec.template.spec.volumes?.some((volume) => volume.hostPath), 'no host paths');
    const [container] = platform.spec.template.spec.containers;
    for (const probe of [container.readinessProbe, container.livenessProbe]) {
      assert.deepEqual(probe?.httpGet?.httpHeaders, [{ name: 'Host', value: `api.${env.get('SVC_GATEWAY_ADDRESS')?.value}` }]);
    }
  });

  test('the agent runs on GPU nodes on the host network, advertises the node\'s address and uses its engine', () => {
    const agent = named('DaemonSet', 'svc-agent') as Workload;
    const pod = agent.spec.template.spec;
    assert.equal(pod.hostNetwork, true);
    assert.equal(pod.nodeSelector?.['nvidia.com/gpu.present'], 'true');
    const env = envOf(agent);
    assert.deepEqual(env.get('SVC_AGENT_ADVERTISE_HOST')?.valueFrom, { fieldRef: { fieldPath: 'status.hostIP' } });
    assert.equal(env.get('SVC_AGENT_RUNTIME')?.value, 'docker');
    const state = env.get('SVC_AGENT_STATE_DIR')?.value;
    assert.ok(pod.volumes?.some((volume) => volume.hostPath?.path === state), 'the state dir is the node\'s own path');
    assert.ok(pod.containers[0].volumeMounts?.some((mount) => mount.mountPath === state), '…mounted at the same path');
  });
});
