// The Kubernetes objects deploy/kubernetes is made of, as zod schemas of the fields its manifests use (each
// kind's shape as Kubernetes requires it), and kubectl kustomize to render a kustomization into them. Shared
// by the test that checks the objects (kubernetes.test.ts) and the one that plays them (kubernetes-play.test.ts).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';

const name = z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/).max(253);
const labels = z.record(z.string().max(317), z.string().max(63));
const metadata = z.object({ name, namespace: name.optional(), labels: labels.optional() }).strict();
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
  envFrom: z.array(z.object({ configMapRef: z.object({ name }).strict() }).strict()).optional(),
  readinessProbe: probe.optional(),
  livenessProbe: probe.optional(),
  resources: z.object({ requests: z.record(z.string(), z.string()).optional(), limits: z.record(z.string(), z.string()).optional() }).strict().optional(),
  securityContext: z.object({ runAsUser: z.number().int().min(0), capabilities: z.object({ add: z.array(z.string()) }).strict().optional() }).strict().optional(),
  volumeMounts: z.array(z.object({ name, mountPath: z.string().startsWith('/'), readOnly: z.boolean().optional() }).strict()).optional(),
}).strict();
const volume = z.object({
  name,
  emptyDir: z.object({}).strict().optional(),
  secret: z.object({ secretName: name, defaultMode: z.number().int().min(0).max(0o777).optional() }).strict().optional(),
  persistentVolumeClaim: z.object({ claimName: name }).strict().optional(),
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
  z.object({ apiVersion: z.literal('v1'), kind: z.literal('Secret'), metadata, type: z.literal('Opaque'), data: z.record(z.string(), z.string()) }).strict(),
  z.object({ apiVersion: z.literal('v1'), kind: z.literal('Namespace'), metadata }).strict(),
  z.object({ apiVersion: z.literal('v1'), kind: z.literal('ConfigMap'), metadata, data: z.record(z.string(), z.string()) }).strict(),
  z.object({
    apiVersion: z.literal('v1'), kind: z.literal('Service'), metadata,
    spec: z.object({
      type: z.enum(['ClusterIP', 'LoadBalancer', 'NodePort']).optional(), selector: labels,
      ports: z.array(z.object({ name: z.string(), port: portNumber, targetPort: portRef, protocol: z.enum(['TCP', 'UDP']) }).strict()).min(1),
    }).strict(),
  }).strict(),
  z.object({
    apiVersion: z.literal('apps/v1'), kind: z.literal('Deployment'), metadata,
    spec: z.object({ replicas: z.number().int().min(0), strategy: z.object({ type: z.enum(['Recreate', 'RollingUpdate']) }).strict().optional(), selector, template: podTemplate }).strict(),
  }).strict(),
  z.object({ apiVersion: z.literal('apps/v1'), kind: z.literal('DaemonSet'), metadata, spec: z.object({ selector, template: podTemplate }).strict() }).strict(),
  z.object({
    apiVersion: z.literal('v1'), kind: z.literal('PersistentVolumeClaim'), metadata,
    spec: z.object({
      accessModes: z.array(z.enum(['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'])).min(1),
      resources: z.object({ requests: z.object({ storage: z.string().regex(/^\d+(Mi|Gi|Ti)$/) }).strict() }).strict(),
    }).strict(),
  }).strict(),
  z.object({
    apiVersion: z.literal('networking.k8s.io/v1'), kind: z.literal('Ingress'), metadata,
    spec: z.object({
      tls: z.array(z.object({ hosts: z.array(z.string()).min(1), secretName: name }).strict()).optional(),
      rules: z.array(z.object({
        host: z.string().regex(/^(\*\.)?[a-z0-9.-]+$/),
        http: z.object({
          paths: z.array(z.object({
            path: z.string().startsWith('/'), pathType: z.enum(['Prefix', 'Exact', 'ImplementationSpecific']),
            backend: z.object({ service: z.object({ name, port: z.object({ name: z.string() }).strict() }).strict() }).strict(),
          }).strict()).min(1),
        }).strict(),
      }).strict()).min(1),
    }).strict(),
  }).strict(),
]);
export type EnvVar = z.infer<typeof envVar>;
export type K8sObject = z.infer<typeof objectSchema>;
export type Workload = Extract<K8sObject, { kind: 'Deployment' | 'DaemonSet' }>;

export function parseObjects(text: string, where: string): K8sObject[] {
  return parseAllDocuments(text).map((document, index) => {
    const parsed = objectSchema.safeParse(document.toJS());
    assert.ok(parsed.success, `${where} #${index + 1}: ${parsed.error?.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
    return parsed.data;
  });
}

/** The objects `kubectl kustomize dir` renders. */
export function kustomize(dir: string): K8sObject[] {
  return parseObjects(execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' }), `kubectl kustomize ${dir}`);
}

/** Why a test needing kubectl cannot run here (one printed line), or false. Under CI it always runs (and fails without kubectl). */
export function needsKubectl(what: string): string | false {
  if (process.env.CI) return false;
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return false;
  } catch {
    console.log(`# skipping ${what}: needs kubectl (Debian package kubernetes-client)`);
    return 'needs kubectl';
  }
}
