// deploy/kubernetes run for real, as far as a machine without a cluster can: the base rendered by `kubectl
// kustomize` through an overlay of the test's own (what any installation sets: its Secrets, where NATS is,
// the node's paths and addresses for the agent), then played by `podman kube play` (podman 4.3, whose gaps
// test/helpers/podman-kube.ts bridges): the svc-api Deployment as its 3 replicas, each a pod of its own on a
// bridge network of the test's, with placement elected among them, on this machine's PostgreSQL and a
// nats-server over TLS (reached from the pods through forwarders that take the pods' subnet only); then the
// svc-agent DaemonSet's pod on the host network, linked through a replica without the lease, running a
// function in a container of the node's engine that every replica invokes. Services, the Ingress, the proxy
// and coturn are not played (docs/scale-out.md says why). Everything is torn down and checked gone.
// Needs kubectl, podman 4.3, runc, the images, nats-server and PostgreSQL: outside CI their absence skips
// it with one printed line, under CI=true it fails.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import pg from 'pg';
import { stringify } from 'yaml';
import { z } from 'zod';
import { firewallTable } from '../api/src/compute/runtimes/docker-firewall.ts';
import { agentTag } from '../api/src/compute/runtimes/docker-network.ts';
import { agentNameOf } from '../api/src/compute/worker.ts';
import { ADMIN_ISSUER, loadAdminKey, signJwt } from '../api/src/control/keys/signing.ts';
import { createDatabase, POSTGRES_ADMIN_URL, postgresAvailable, type TestDatabase } from '../api/test/helpers/databases.ts';
import { request } from '../api/test/helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from '../api/test/helpers/nats.ts';
import { containersLabelled, image, needsPodman, removeAgentLeftovers, startEngine, type Engine } from '../api/test/helpers/podman.ts';
import { until } from '../api/test/helpers/wait.ts';
import { freeUdpRange } from '../streaming-app/test/helpers.ts';
import { forwardFromSubnet, type Forwarder } from './helpers/forward.ts';
import { kustomize, needsKubectl, type K8sObject, type Workload } from './helpers/kubernetes.ts';
import { createNetwork, createSecrets, needsPodman43, play, playable, podman, removeTagged, tagged } from './helpers/podman-kube.ts';

const run = promisify(execFile);
const BASE = path.resolve(import.meta.dirname, '../deploy/kubernetes');
const leaseRow = z.object({ holder: z.string(), address: z.string(), live: z.boolean() });
const WHAT = 'podman kube play of deploy/kubernetes';
const skip = needsKubectl(WHAT) || needsPodman43(WHAT) || needsPodman(['localhost/svc/platform:dev', image('echo')], WHAT)
  || (!natsServerAvailable() && 'needs nats-server') || (!(await postgresAvailable()) && 'needs PostgreSQL');

/** What the overlay sets: the installation's Secrets and where its services are, and for the agent its node's. */
interface Site {
  natsUrl: string;
  platformSecrets: Record<string, string>;
  natsSecrets: Record<string, string>;
  natsCa: string;
  adminKey: string;
  agent?: { credential: string; server: string; nodeAddress: string; socket: string; stateDir: string; udpRange: string };
}

/** The overlay, in `dir`: the base under a per-run name suffix (podman's names are machine-wide), and the site's settings. */
async function writeOverlay(dir: string, suffix: string, site: Site): Promise<void> {
  const file = (name: string, text: string) => writeFile(path.join(dir, name), text, { mode: 0o600 });
  const envFile = (values: Record<string, string>) => Object.entries(values).map(([key, value]) => `${key}=${value}\n`).join('');
  await file('platform.env', envFile(site.platformSecrets));
  await file('nats.env', envFile(site.natsSecrets));
  await file('ca.crt', site.natsCa);
  await file('admin-signing-key.pem', site.adminKey);
  const secret = (name: string, source: { envs: string[] } | { files: string[] }) => ({ name, options: { disableNameSuffixHash: true }, ...source });
  const { agent } = site;
  if (agent) await file('agent.env', envFile({ SVC_AGENT_CREDENTIAL: agent.credential }));
  await file('kustomization.yaml', stringify({
    resources: [path.relative(dir, BASE)],
    // The base's namespace: the generated Secrets must be in it for the references to them to take the suffix.
    namespace: 'svc',
    nameSuffix: suffix,
    secretGenerator: [
      secret('svc-platform', { envs: ['platform.env'] }), secret('svc-nats', { envs: ['nats.env'] }),
      secret('svc-nats-tls', { files: ['ca.crt'] }), secret('svc-admin-signing-key', { files: ['admin-signing-key.pem'] }),
      ...(agent ? [secret('svc-agent', { envs: ['agent.env'] })] : []),
    ],
    patches: [
      { target: { kind: 'ConfigMap', name: 'svc-platform' }, patch: stringify([{ op: 'replace', path: '/data/SVC_NATS_URL', value: site.natsUrl }]) },
      ...(agent ? [{ patch: stringify(agentPatch(agent)) }] : []),
    ],
  }));
}

/**
 * The agent's node, here: no Service name to reach the replicas by (a replica's own address instead), no
 * status.hostIP (podman 4.3 resolves only metadata fields: the host as the pods see it), no GPUs, and the
 * engine's socket, state dir and UDP ports of the test's own (the state dir at the same path inside and out).
 */
function agentPatch(agent: NonNullable<Site['agent']>) {
  const value = (name: string, text: string) => ({ name, value: text, valueFrom: null });
  return {
    apiVersion: 'apps/v1', kind: 'DaemonSet', metadata: { name: 'svc-agent' },
    spec: { template: { spec: {
      containers: [{
        name: 'agent',
        env: [
          value('SVC_AGENT_SERVER', agent.server), value('SVC_AGENT_ADVERTISE_HOST', agent.nodeAddress),
          value('SVC_AGENT_DOCKER_PUBLISH_ADDRESS', agent.nodeAddress), value('SVC_AGENT_DOCKER_GPUS', 'false'),
          value('SVC_AGENT_UDP_PORT_RANGE', agent.udpRange), value('SVC_AGENT_STATE_DIR', agent.stateDir), value('SVC_DATA_DIR', agent.stateDir),
        ],
        volumeMounts: [{ mountPath: '/var/lib/svc-agent', $patch: 'delete' }, { name: 'state', mountPath: agent.stateDir }],
      }],
      volumes: [{ name: 'engine', hostPath: { path: agent.socket } }, { name: 'state', hostPath: { path: agent.stateDir } }],
    } } },
  };
}

type Probe = NonNullable<NonNullable<Workload['spec']['template']['spec']['containers'][number]['readinessProbe']>['httpGet']>;

/** An HTTP probe as the kubelet sends it: GET its path with its headers. */
const probed = (replica: { url: string }, probe: Probe) =>
  request(replica.url, 'GET', probe.path, { headers: Object.fromEntries((probe.httpHeaders ?? []).map((header) => [header.name.toLowerCase(), header.value])) });

function rendered<K extends K8sObject['kind']>(objects: K8sObject[], kind: K, name: string): Extract<K8sObject, { kind: K }> {
  const found = objects.find((object): object is Extract<K8sObject, { kind: K }> => object.kind === kind && object.metadata.name === name);
  assert.ok(found, `${kind} ${name} rendered`);
  return found;
}

describe(WHAT, { skip }, () => {
  const tag = `kp${randomBytes(4).toString('hex')}`;
  const suffix = `-${tag}`;
  const played: string[] = [];
  const timings: string[] = [];
  let dir: string;
  let stateDir: string | undefined;
  let engine: Engine | undefined;
  let database: TestDatabase | undefined;
  let nats: TestNats | undefined;
  let forwarders: Forwarder[] = [];
  let site: Site;
  let network: Awaited<ReturnType<typeof createNetwork>>;
  let hosts: { api: string; keys: string };
  /** The API's pods: their names and where each is reached (its own address on the network, the gateway's port). */
  let replicas: { pod: string; url: string }[];
  /** The platform container's probes as declared (podman 4.3 runs neither; the test does, as the kubelet would). */
  let probes: { readiness: Probe; liveness: Probe };

  const timed = async <T>(what: string, step: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    const result = await step();
    timings.push(`${what}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return result;
  };

  /** Every step, whatever the others did (a failed start leaves some of it); each runs once. */
  async function teardown(): Promise<void> {
    const steps: (() => unknown)[] = [
      () => removeTagged(tag, played),
      () => (engine && stateDir ? removeAgentLeftovers(engine, agentNameOf(stateDir)) : undefined),
      ...forwarders.splice(0).map((forwarder) => () => forwarder.close()),
      () => nats?.stop(), () => database?.drop(), () => engine?.close(),
      () => stateDir && rm(stateDir, { recursive: true, force: true }), () => dir && rm(dir, { recursive: true, force: true }),
    ];
    const failures: unknown[] = [];
    for (const step of steps) await Promise.resolve().then(step).catch((error: unknown) => failures.push(error));
    [nats, database, engine] = [undefined, undefined, undefined];
    if (failures.length) throw new AggregateError(failures, 'teardown');
  }

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'svc-kube-play-'));
    network = await createNetwork(`svc-kube-${tag}`);
    database = await createDatabase('postgres');
    nats = await startNats({ tls: true, tlsAddresses: [network.gateway], clientCertificates: false });
    const natsPort = Number(new URL(nats.settings.natsUrl).port);
    forwarders = [await forwardFromSubnet(network.subnet, Number(new URL(POSTGRES_ADMIN_URL).port)), await forwardFromSubnet(network.subnet, natsPort)];
    const [postgres, natsForward] = forwarders;
    const databaseUrl = new URL(database.databaseUrl!);
    Object.assign(databaseUrl, { hostname: network.gateway, port: String(postgres.port) });
    site = {
      natsUrl: `tls://${network.gateway}:${natsForward.port}`,
      platformSecrets: {
        SVC_DATABASE_URL: databaseUrl.toString(), SVC_SECRETS_KEY: randomBytes(32).toString('base64'), SVC_TURN_SECRET: randomBytes(16).toString('hex'),
      },
      natsSecrets: { SVC_NATS_USER: nats.settings.natsUser!, SVC_NATS_PASSWORD: nats.settings.natsPassword! },
      natsCa: await readFile(nats.caFile!, 'utf8'),
      adminKey: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    };
    await writeOverlay(dir, suffix, site);
    const objects = kustomize(dir);
    const config = rendered(objects, 'ConfigMap', `svc-platform${suffix}`);
    const api = rendered(objects, 'Deployment', `svc-api${suffix}`);
    hosts = { api: `api.${config.data.SVC_GATEWAY_ADDRESS}`, keys: `api-keys.${config.data.SVC_GATEWAY_ADDRESS}` };
    await createSecrets(objects.filter((object) => object.kind === 'Secret'), [api.spec.template.spec], dir);
    const file = path.join(dir, 'platform.yaml');
    await timed('podman kube play of the API Deployment (3 pods)', () =>
      play(file, [config, rendered(objects, 'PersistentVolumeClaim', `svc-blobs${suffix}`), playable(api, tag)], network.name));
    played.push(file);
    const [container] = api.spec.template.spec.containers;
    const port = container.ports?.find((candidate) => candidate.name === 'gateway')?.containerPort;
    replicas = await Promise.all(Array.from({ length: api.spec.replicas }, async (_, index) => {
      const pod = `${api.metadata.name}-pod-${index}`;
      const address = (await podman(['inspect', `${pod}-${container.name}`, '--format', `{{(index .NetworkSettings.Networks "${network.name}").IPAddress}}`])).trim();
      return { pod, url: `http://${address}:${port}` };
    }));
    probes = { readiness: container.readinessProbe!.httpGet!, liveness: container.livenessProbe!.httpGet! };
    for (const probe of Object.values(probes)) assert.equal(probe.port, 'gateway', 'the probes reach the port the replicas are called at');
    await timed('every replica ready (readiness probe)', () => Promise.all(replicas.map((replica) => until(`${replica.pod} ready`, async () =>
      (await probed(replica, probes.readiness).catch(() => undefined))?.status === 200, 120_000))));
  });

  after(teardown);

  test('the Deployment runs as its 3 replicas, each its own pod, ready and live by the probes the manifests declare, all on the one blob volume', async () => {
    assert.equal(replicas.length, 3);
    assert.equal(new Set(replicas.map((replica) => replica.url)).size, 3, 'an address each');
    for (const replica of replicas) {
      for (const probe of [probes.readiness, probes.liveness]) {
        const answer = await probed(replica, probe);
        assert.equal(answer.status, 200, `${replica.pod} ${probe.path}: ${answer.text}`);
      }
      const mounts = (await podman(['inspect', `${replica.pod}-platform`, '--format', '{{range .Mounts}}{{.Name}}={{.Destination}} {{end}}'])).trim().split(' ');
      assert.ok(mounts.includes(`svc-blobs${suffix}=/var/lib/svc/blobs`), `${replica.pod}: ${mounts.join(', ')}`);
    }
  });

  test('placement is elected: one replica holds the lease, at its own address', async () => {
    const lease = await currentLease();
    assert.ok(lease?.live, 'a live lease');
    const holder = replicas.find((replica) => replica.url === lease.address);
    assert.ok(holder, `the lease names a replica's address: ${lease.address}`);
    assert.ok(lease.holder.startsWith(`${holder.pod}-`), `held by ${lease.holder}, the pod at ${lease.address}`);
  });

  test('every replica accepts an admin token signed with the key from Secret svc-admin-signing-key', async () => {
    const adminToken = await mintAdminToken();
    for (const replica of replicas) {
      const answer = await request(replica.url, 'POST', '/v1/admin/keys', { host: hosts.keys, bearer: adminToken, body: {} });
      assert.equal(answer.status, 200, `${replica.pod}: ${answer.text}`);
    }
  });

  test('the agent DaemonSet\'s pod links through a replica without the lease; its function runs in the node\'s engine and every replica invokes it', async () => {
    const lease = await currentLease();
    const [edge, other] = replicas.filter((replica) => replica.url !== lease?.address);
    const api = (replica: { url: string }, method: string, url: string, options: Record<string, unknown> = {}) =>
      request(replica.url, method, url, { host: hosts.api, ...options });
    const token = (await request(edge.url, 'POST', '/v1/admin/keys', { host: hosts.keys, bearer: await mintAdminToken(), body: {} })).body.value;
    const cluster = await api(edge, 'POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'kube-play', clusterGroupName: 'kube-play', gpus: [{ name: 'CPU', capacity: 2, instanceTypes: [{ name: 'CPU_1x' }] }] },
    });
    assert.equal(cluster.status, 200, cluster.text);

    engine = await startEngine();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'svc-kube-agent-'));
    const udp = await freeUdpRange(8);
    site.agent = {
      credential: cluster.body.agentCredential, server: edge.url, nodeAddress: network.gateway, socket: engine.socketPath, stateDir,
      udpRange: `${udp.min}-${udp.max}`,
    };
    await writeOverlay(dir, suffix, site);
    const objects = kustomize(dir);
    const agent = rendered(objects, 'DaemonSet', `svc-agent${suffix}`);
    await createSecrets([rendered(objects, 'Secret', `svc-agent${suffix}`)], [agent.spec.template.spec], dir);
    const file = path.join(dir, 'agent.yaml');
    await timed('the agent\'s pod played and linked', async () => {
      await play(file, [playable(agent, tag)], 'host');
      played.push(file);
      await until('the agent linked', async () =>
        (await api(other, 'GET', `/v1/accounts/svc-default/clusters/${cluster.body.clusterId}`, { bearer: token })).body?.status === 'CONNECTED', 60_000);
    });

    const created = await api(other, 'POST', '/v2/svc/functions', {
      bearer: token,
      body: {
        name: 'kube-echo', containerImage: image('echo'), inferenceUrl: '/echo', inferencePort: 8000,
        health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 },
      },
    });
    assert.equal(created.status, 200, created.text);
    const { id, versionId } = created.body.function;
    const deployed = await api(other, 'POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token, body: { deploymentSpecifications: [{ gpu: 'CPU', instanceType: 'CPU_1x', minInstances: 1, maxInstances: 1, clusters: ['kube-play'] }] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    await timed('the function deployed to the agent and running', () => until(`function ${id} running`, async () => {
      const record = (await api(edge, 'GET', `/v2/svc/functions/${id}/versions/${versionId}`, { bearer: token })).body.function;
      assert.notEqual(record.status, 'ERROR', JSON.stringify(record));
      return record.activeInstances.some((instance: { instanceStatus: string }) => instance.instanceStatus === 'RUNNING');
    }, 90_000));
    const key = (await request(edge.url, 'POST', '/v1/keys', {
      host: hosts.keys, bearer: token,
      headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'kube-play' },
      body: { expires_at: new Date(Date.now() + 3_600_000).toISOString(), authorizations: { policies: [{ scopes: ['invoke_function'] }] } },
    })).body.value;
    for (const replica of replicas) {
      // A replica that has not yet seen the instance ready (over NATS) holds the request until it has: a
      // loaded machine takes longer than the default poll window for that.
      const invoked = await api(replica, 'POST', `/v2/svc/pexec/functions/${id}`, { bearer: key, body: { through: replica.pod }, headers: { 'svc-poll-seconds': '60' } });
      assert.equal(invoked.status, 200, `${replica.pod}: ${invoked.text}`);
      assert.deepEqual(invoked.body.echo, { through: replica.pod });
    }
  });

  test('torn down, nothing is left: no pod, container, volume, secret or network of the run, nothing of the agent\'s', async (t) => {
    const agentName = stateDir && agentNameOf(stateDir);
    await timed('teardown', async () => {
      await removeTagged(tag, played);
      if (engine && agentName) await removeAgentLeftovers(engine, agentName);
    });
    assert.deepEqual(await tagged(tag), { pods: [], containers: [], volumes: [], secrets: [], networks: [] });
    if (engine && agentName) {
      assert.deepEqual(await containersLabelled(engine, `svc.agent=${agentName}`), [], 'the agent\'s instances');
      const filters = encodeURIComponent(JSON.stringify({ label: [`svc.agent=${agentName}`] }));
      assert.deepEqual((await engine.call('GET', `/networks?filters=${filters}`)).body, [], 'the agent\'s account networks');
      await assert.rejects(run('nft', ['list', 'table', 'inet', firewallTable(agentTag(agentName))]), 'the agent\'s nftables table');
    }
    for (const line of timings) t.diagnostic(line);
    t.diagnostic(`load ${os.loadavg()[0].toFixed(1)} on ${os.availableParallelism()} cores`);
  });

  async function currentLease() {
    const client = new pg.Client({ connectionString: database!.databaseUrl });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT holder, address, expires_at > now() AS live FROM placement_lease WHERE name = $1', ['placement']);
      return rows.length ? leaseRow.parse(rows[0]) : undefined;
    } finally {
      await client.end();
    }
  }

  /** An admin token as `svc admin-token` signs it, with the key the overlay put in Secret svc-admin-signing-key. */
  async function mintAdminToken(): Promise<string> {
    const keyFile = path.join(dir, 'admin-signing-key.pem');
    return signJwt(await loadAdminKey(keyFile, { create: false }), { iss: ADMIN_ISSUER, aud: 'svc-api', sub: 'kube-play' }, new Date(Date.now() + 600_000));
  }
});
