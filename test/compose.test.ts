// docker-compose.yml started for real: docker-compose (Debian's, v1) against podman's Docker API, the
// project's images, the steps docs/containers.md gives — the stack up (PostgreSQL, coturn, platform), a
// cluster registered and its agent container started with the credential, a function deployed and
// invoked through the gateway (the agent runs it as a sibling container through the engine's socket), then
// the proxy container started for a streaming function and a session signalled through it; coturn relays
// for credentials minted with the TURN secret, which is on none of its command lines.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { createTurnClient } from 'werift';
import { WebSocket } from 'ws';
import { agentNameOf } from '../api/src/compute/worker.ts';
import { mintTurnCredentials } from '../api/src/turn/credentials.ts';
import { request } from '../api/test/helpers/http.ts';
import { CONTAINERS_CONF, image, needsPodman, removeContainers, startEngine, type Engine } from '../api/test/helpers/podman.ts';
import { freePort, until } from '../api/test/helpers/wait.ts';
import { freeUdpRange } from '../streaming-app/test/helpers.ts';

const run = promisify(execFile);
const REPO = path.resolve(import.meta.dirname, '..');
const COMPOSE = '/usr/bin/docker-compose';
const IMAGES = [image('platform'), image('proxy'), image('streaming-app'), image('echo'), 'localhost/svc/postgres:15', 'localhost/svc/coturn:4.6'];
const skip = needsCompose() || needsPodman(IMAGES, 'docker-compose.yml');
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 };

describe('docker-compose.yml on podman', { skip }, () => {
  const project = `svc-test-${process.pid}`;
  let engine: Engine;
  let stateDir: string;
  let env: NodeJS.ProcessEnv;
  let gateway: string;
  let token: string;
  let key: string;

  const compose = (args: string[], extra: NodeJS.ProcessEnv = {}) =>
    run(COMPOSE, ['-p', project, '-f', path.join(REPO, 'docker-compose.yml'), ...args], { env: { ...env, ...extra }, maxBuffer: 16 * 1024 * 1024 });
  const api = (method: string, url: string, options: Record<string, unknown> = {}) => request(gateway, method, url, { host: 'api.localhost', ...options });

  async function deploy(body: Record<string, unknown>) {
    const created = await api('POST', '/v2/svc/functions', { bearer: token, body: { name: `compose-${randomBytes(3).toString('hex')}`, ...body } });
    assert.equal(created.status, 200, created.text);
    const { id, versionId } = created.body.function;
    const deployed = await api('POST', `/v2/svc/deployments/functions/${id}/versions/${versionId}`, {
      bearer: token, body: { deploymentSpecifications: [{ gpu: 'CPU', instanceType: 'CPU_1x', minInstances: 1, maxInstances: 1, clusters: ['compose'] }] },
    });
    assert.equal(deployed.status, 200, deployed.text);
    await until(`function ${id} running`, async () => {
      const record = (await api('GET', `/v2/svc/functions/${id}/versions/${versionId}`, { bearer: token })).body.function;
      return record.status === 'ACTIVE' && record.activeInstances.some((instance: any) => instance.instanceStatus === 'RUNNING');
    }, 90_000);
    return id as string;
  }

  before(async () => {
    engine = await startEngine();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'svc-compose-agent-'));
    const [port, turnPort, proxyPort, postgresPort, relay, media] = [
      await freePort(), await freePort(), await freePort(), await freePort(), await freeUdpRange(20), await freeUdpRange(8)];
    env = {
      ...process.env, DOCKER_HOST: engine.dockerHost, DOCKER_SOCKET: engine.socketPath, CONTAINERS_CONF: process.env.CONTAINERS_CONF ?? CONTAINERS_CONF,
      SVC_TURN_SECRET: randomBytes(16).toString('hex'), SVC_SECRETS_KEY: randomBytes(32).toString('base64'),
      SVC_POSTGRES_IMAGE: 'localhost/svc/postgres:15', SVC_COTURN_IMAGE: 'localhost/svc/coturn:4.6',
      SVC_PLATFORM_IMAGE: image('platform'), SVC_PROXY_IMAGE: image('proxy'),
      SVC_PORT: String(port), SVC_POSTGRES_PORT: String(postgresPort), SVC_TURN_PORT: String(turnPort),
      SVC_TURN_MIN_PORT: String(relay.min), SVC_TURN_MAX_PORT: String(relay.max), SVC_PROXY_PORT: String(proxyPort),
      SVC_AGENT_STATE_DIR: stateDir, SVC_AGENT_UDP_PORT_RANGE: `${media.min}-${media.max}`, SVC_LOG_LEVEL: 'info',
      // coturn at an address the streaming container reaches from its bridge network (its 127.0.0.1 is its own,
      // so a loopback TURN server is rightly not handed to it).
      SVC_PUBLIC_IP: Object.values(os.networkInterfaces()).flat().find((item) => item && !item.internal && item.family === 'IPv4')?.address ?? '127.0.0.1',
    };
    gateway = `http://127.0.0.1:${port}`;
    await compose(['up', '-d']);
    // The platform may start before PostgreSQL accepts connections; compose restarts it until it does.
    await until('the platform healthy', async () => (await request(gateway, 'GET', '/health').catch(() => undefined))?.status === 200, 90_000);
    const { stdout } = await compose(['logs', '--no-color', 'platform']);
    const secret = /Bootstrap secret[^:]*: (svcboot-\S+)/.exec(stdout)?.[1];
    assert.ok(secret, 'the platform printed its bootstrap secret');
    token = (await request(gateway, 'POST', '/v1/admin/keys', { host: 'api-keys.localhost', bearer: secret, body: {} })).body.value;
    key = (await request(gateway, 'POST', '/v1/keys', {
      host: 'api-keys.localhost', bearer: token,
      headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'compose-test' },
      body: { expires_at: new Date(Date.now() + 3_600_000).toISOString(), authorizations: { policies: [{ scopes: ['invoke_function', 'list_functions'] }] } },
    })).body.value;
    const cluster = await api('POST', '/v1/accounts/svc-default/clusters', {
      bearer: token, body: { clusterName: 'compose', clusterGroupName: 'compose-group', gpus: [{ name: 'CPU', capacity: 4, instanceTypes: [{ name: 'CPU_1x' }] }] },
    });
    assert.equal(cluster.status, 200, cluster.text);
    await compose(['--profile', 'agent', 'up', '-d'], { SVC_AGENT_CREDENTIAL: cluster.body.agentCredential });
    await until('the agent connected', async () =>
      (await api('GET', `/v1/accounts/svc-default/clusters/${cluster.body.clusterId}`, { bearer: token })).body.status === 'CONNECTED', 60_000);
  });

  after(async () => {
    if (env) await compose(['--profile', 'agent', '--profile', 'proxy', 'down', '--volumes', '--timeout', '15']).catch((error) => console.log(error.stderr));
    if (engine) await removeContainers(engine, `svc.agent=${agentNameOf(stateDir)}`);
    await engine?.close();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  test('the platform runs on PostgreSQL and passes its HEALTHCHECK; a function runs in a sibling container and is invoked through the gateway', async () => {
    const { stdout } = await compose(['logs', '--no-color', 'platform']);
    assert.match(stdout, /"store":"postgres"/);
    await run('podman', ['healthcheck', 'run', `${project}_platform_1`], { env });
    const id = await deploy({ containerImage: image('echo'), inferenceUrl: '/echo', inferencePort: 8000, health });
    const invoked = await api('POST', `/v2/svc/pexec/functions/${id}`, { bearer: key, body: { through: 'compose' } });
    assert.equal(invoked.status, 200, invoked.text);
    assert.deepEqual(invoked.body.echo, { through: 'compose' });
  });

  test('coturn has the TURN secret from a 0600 file, not its command line, and relays for credentials minted with it', async () => {
    const secret = env.SVC_TURN_SECRET!;
    const container = `${project}_coturn_1`;
    const [inspected] = JSON.parse((await run('podman', ['inspect', container], { env })).stdout);
    const { stdout: processes } = await run('podman', ['top', container, 'args'], { env });
    for (const commandLine of [[inspected.Path, ...inspected.Args].join(' '), processes]) {
      assert.ok(!commandLine.includes(secret), 'the TURN secret is on coturn\'s command line');
    }
    const configFile = /turnserver -c (\S+)/.exec(processes)?.[1];
    assert.ok(configFile, processes);
    const { stdout: mode } = await run('podman', ['exec', container, 'stat', '-c', '%a', configFile], { env });
    assert.equal(mode.trim(), '600');

    const allocate = (withSecret: string) => createTurnClient({ address: ['127.0.0.1', Number(env.SVC_TURN_PORT)], ...mintTurnCredentials(withSecret, 'compose', 600, new Date()) });
    const turn = await allocate(secret);
    assert.ok(turn.relayedAddress[1] >= Number(env.SVC_TURN_MIN_PORT) && turn.relayedAddress[1] <= Number(env.SVC_TURN_MAX_PORT), String(turn.relayedAddress));
    await turn.close();
    await assert.rejects(allocate(randomBytes(16).toString('hex')), 'another secret\'s credentials are refused');
  });

  test('a streaming session through the proxy container, to the streaming container the agent started', async () => {
    const id = await deploy({
      containerImage: image('streaming-app'), functionType: 'STREAMING', inferenceUrl: '/sign_in', inferencePort: 49100,
      health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8011, timeout: 'PT10S', expectedStatusCode: 200 },
      containerEnvironment: [{ key: 'STREAMING_VIDEO_SIZE', value: '320x180' }, { key: 'STREAMING_ENCODER', value: 'libx264' }],
    });
    await compose(['--profile', 'proxy', 'up', '-d', 'proxy'], { SVC_PROXY_API_KEY: key, STREAMING_FUNCTION_ID: id });
    const proxy = `wss://127.0.0.1:${env.SVC_PROXY_PORT}/sign_in`;
    const ws = await until('the proxy to take the WebSocket', () => new Promise<WebSocket | undefined>((resolve) => {
      const socket = new WebSocket(proxy, { rejectUnauthorized: false });
      socket.once('open', () => resolve(socket));
      socket.once('error', () => resolve(undefined));
    }), 60_000);
    const messages: any[] = [];
    ws.on('message', (data) => messages.push(JSON.parse(data.toString())));
    ws.send(JSON.stringify({ type: 'hello', protocol: 1 }));
    const offer = await until('the offer from the streaming container', async () => messages.find((message) => message.type === 'offer'), 30_000);
    assert.match(offer.sdp, /^v=0/);
    const config = messages.find((message) => message.type === 'config');
    assert.ok(config.iceServers?.some((server: any) => String(server.urls).includes(`:${env.SVC_TURN_PORT}`)), 'coturn handed to the session');
    ws.send(JSON.stringify({ type: 'bye' }));
    ws.close();
  });
});

function needsCompose(): string | false {
  if (process.env.CI || existsSync(COMPOSE)) return false;
  console.log('# skipping docker-compose.yml: needs docker-compose (Debian package docker-compose)');
  return 'needs docker-compose';
}
