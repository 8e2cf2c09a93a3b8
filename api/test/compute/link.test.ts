// The agent's end of the link against a plain ws server playing the control plane's documented messages
// (welcome, desired): credential and Host on the upgrade, hello with GPUs and reports, reconnect after a
// refusal and after the control plane goes away, resync without duplicate instances; the node name and
// the lease in hello, and a welcome of another lease generation stopping what runs (fencing).
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { WebSocketServer, type WebSocket } from 'ws';
import { startAgent, type Agent } from '../../src/compute/agent.ts';
import { connectAgentLink, type AgentLink } from '../../src/compute/link.ts';
import type { AgentMessage, ControlMessage, GpuOffer } from '../../src/compute/protocol.ts';
import { createProcessRuntime } from '../../src/compute/runtimes/process.ts';
import { captureLog, eventually, instanceSpec, SAMPLES_CATALOG, tempDir } from './helpers.ts';

/** The control plane's side, as protocol.ts documents it. */
class ControlPlaneStandIn {
  readonly upgrades: IncomingMessage[] = [];
  readonly messages: AgentMessage[][] = []; // per connection
  refuseNext = 0;
  socket?: WebSocket;
  onHello?: (send: (message: ControlMessage) => void, hello: Extract<AgentMessage, { type: 'hello' }>) => void;
  #server?: http.Server;
  #wss?: WebSocketServer;
  port = 0;

  async listen(port = 0): Promise<void> {
    this.#server = http.createServer();
    this.#wss = new WebSocketServer({ noServer: true });
    this.#server.on('upgrade', (req, socket, head) => {
      this.upgrades.push(req);
      if (this.refuseNext > 0 || req.url !== '/v1/agents/link') {
        this.refuseNext--;
        socket.end('HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
        return;
      }
      this.#wss!.handleUpgrade(req, socket, head, (ws) => {
        const received: AgentMessage[] = [];
        this.messages.push(received);
        this.socket = ws;
        const send = (message: ControlMessage) => ws.send(JSON.stringify(message));
        ws.on('message', (data) => {
          const message = JSON.parse(data.toString()) as AgentMessage;
          received.push(message);
          if (message.type === 'hello') this.onHello?.(send, message);
        });
      });
    });
    await new Promise<void>((resolve) => this.#server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.#server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const client of this.#wss?.clients ?? []) client.terminate();
    this.#wss?.close();
    this.#server?.closeAllConnections();
    await new Promise((resolve) => this.#server?.close(resolve));
  }
}

describe('agent link', () => {
  const { log, lines } = captureLog();
  let state: Awaited<ReturnType<typeof tempDir>>;
  let agent: Agent;
  let link: AgentLink | undefined;
  const control = new ControlPlaneStandIn();
  const gpus: GpuOffer[] = [{ name: 'L40S', capacity: 2, instanceTypes: [{ name: 'LOCAL.GPU.L40S_1x', default: true }] }];

  before(async () => {
    state = await tempDir('link');
    agent = await startAgent({
      runtime: createProcessRuntime({ catalogFile: SAMPLES_CATALOG, stateDir: state.dir, log }),
      stateDir: state.dir, log, probe: { startupIntervalMs: 100 },
    });
    await control.listen();
  });

  after(async () => {
    await link?.close();
    await agent.stop();
    await control.close();
    await state.remove();
  });

  test('hello on every connect, desired applied, reports forwarded; a reconnect resyncs without a second start', async () => {
    const spec = instanceSpec('local/echo');
    control.refuseNext = 1;
    control.onHello = (send) => {
      send({ type: 'welcome', clusterId: 'cluster-1', clusterName: 'local', ncaId: 'nca-test' });
      send({ type: 'desired', instances: [spec] });
    };
    const welcomes: string[] = [];
    link = connectAgentLink({
      server: `http://127.0.0.1:${control.port}`, credential: 'svcagent-secret', apiHost: 'api.example.test',
      agent, gpus, agentVersion: '9.9.9', log, reconnect: { initialMs: 50, maxMs: 200 },
      onWelcome: (welcome) => welcomes.push(welcome.clusterId),
    });

    // The first attempt is refused (401); the link tries again.
    const first = await eventually(() => control.messages[0]?.find((m) => m.type === 'instance' && m.report.state === 'RUNNING'), 'RUNNING over the link');
    assert.equal(control.upgrades.length, 2);
    for (const upgrade of control.upgrades) {
      assert.equal(upgrade.headers.authorization, 'Bearer svcagent-secret');
      assert.equal(upgrade.headers.host, 'api.example.test');
    }
    const hello = control.messages[0][0];
    assert.deepEqual(hello, { type: 'hello', agentVersion: '9.9.9', runtime: 'process', gpus, instances: [] });
    // A starting instance also reports each new health check (its state unchanged): count the changes.
    const states = control.messages[0].slice(1).map((m) => m.type === 'instance' && m.report.state);
    assert.deepEqual(states.filter((state, at) => state !== states[at - 1]), ['STARTING', 'RUNNING']);
    assert.deepEqual(welcomes, ['cluster-1']);
    assert.ok(link.connected);
    const endpoint = first.type === 'instance' && first.report.endpoint;

    // The control plane goes away and comes back on the same port.
    await control.close();
    await eventually(() => (link!.connected ? undefined : true), 'the link to notice');
    await control.listen(control.port);
    const resync = await eventually(() => control.messages[1]?.[0], 'hello after the reconnect');
    assert.equal(resync.type, 'hello');
    const reports = resync.type === 'hello' ? resync.instances : [];
    assert.deepEqual(reports.map((r) => [r.instanceId, r.state]), [[spec.instanceId, 'RUNNING']]);
    assert.deepEqual(reports[0].endpoint, endpoint, 'the same instance, still running');

    // The re-sent desired set (the same instance) starts nothing new; an empty one stops it.
    control.socket!.send(JSON.stringify({ type: 'desired', instances: [] } satisfies ControlMessage));
    await eventually(() => control.messages[1].find((m) => m.type === 'instance' && m.report.state === 'STOPPED'), 'STOPPED over the link');
    assert.deepEqual(control.messages[1].slice(1).map((m) => m.type === 'instance' && m.report.state), ['STOPPED'],
      'no STARTING after the resync: the instance was never started twice');

    await link.close();
    assert.equal(link.connected, false);
  });

  test('hello says the node and the lease it held; a welcome of the same generation keeps what runs, another stops it (fencing)', async () => {
    const [before, after] = [instanceSpec('local/echo'), instanceSpec('local/echo')];
    let generation = 1;
    control.onHello = (send) => {
      send({ type: 'welcome', clusterId: 'cluster-1', clusterName: 'local', ncaId: 'nca-test', lease: { nodeId: 'node-1', name: 'host-a', generation, leaseMs: 30_000 } });
      send({ type: 'desired', instances: [generation === 1 ? before : after] });
    };
    const first = control.messages.length;
    const reportsOn = (connection: number, instanceId: string) =>
      (control.messages[connection] ?? []).flatMap((m) => (m.type === 'instance' && m.report.instanceId === instanceId ? [m.report.state] : []));
    link = connectAgentLink({
      server: `http://127.0.0.1:${control.port}`, credential: 'svcagent-secret', agent, gpus, agentVersion: '9.9.9', log,
      reconnect: { initialMs: 50, maxMs: 200 }, node: 'host-a',
    });
    await eventually(() => reportsOn(first, before.instanceId).includes('RUNNING') || undefined, 'RUNNING under generation 1');
    const hello = control.messages[first][0];
    assert.deepEqual(hello.type === 'hello' && [hello.node, hello.lease], ['host-a', undefined], 'a first hello holds no lease');

    control.socket!.terminate();
    const again = await eventually(() => control.messages[first + 1]?.[0], 'hello after a dropped connection');
    assert.deepEqual(again.type === 'hello' && [again.node, again.lease], ['host-a', { nodeId: 'node-1', generation: 1 }]);
    assert.deepEqual(again.type === 'hello' && again.instances.map((report) => [report.instanceId, report.state]), [[before.instanceId, 'RUNNING']]);

    generation = 2;
    control.socket!.terminate();
    await eventually(() => reportsOn(first + 2, before.instanceId).includes('STOPPED') || undefined, 'the old generation\'s instance stopped');
    await eventually(() => reportsOn(first + 2, after.instanceId).includes('RUNNING') || undefined, 'the new desired set running');
    assert.deepEqual(reportsOn(first + 1, before.instanceId), [], 'the same generation stopped nothing');
    assert.ok(lines.some((line) => line.includes('stopping the instances of the old generation')));

    await link.close();
  });

  test('several servers are tried in turn; a message of an older placement term is refused, a newer one taken', async () => {
    const spec = instanceSpec('local/echo');
    control.onHello = (send) => {
      send({ type: 'welcome', clusterId: 'cluster-1', clusterName: 'local', ncaId: 'nca-test', epoch: 3 });
      send({ type: 'desired', instances: [spec], epoch: 3 });
    };
    const first = control.messages.length;
    const reports = () => (control.messages[first] ?? []).flatMap((m) => (m.type === 'instance' && m.report.instanceId === spec.instanceId ? [m.report.state] : []));
    // The first server refuses connections (nothing listens there): the link goes on to the next.
    const closed = await new Promise<number>((resolve) => {
      const probe = http.createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    link = connectAgentLink({
      server: `http://127.0.0.1:${closed}, http://127.0.0.1:${control.port}`, credential: 'svcagent-secret', agent, gpus, agentVersion: '9.9.9', log,
      reconnect: { initialMs: 50, maxMs: 200 },
    });
    await eventually(() => reports().includes('RUNNING') || undefined, 'RUNNING through the second server');
    assert.equal(link.server, `http://127.0.0.1:${control.port}`);

    // A replica whose term (2) has been taken over still sends an empty set: refused, the instance runs on.
    control.socket!.send(JSON.stringify({ type: 'desired', instances: [], epoch: 2 } satisfies ControlMessage));
    await eventually(() => lines.some((line) => line.includes('a message of an older placement term was refused')) || undefined, 'the refusal logged');
    assert.ok(!reports().includes('STOPPED'), 'the stale command changed nothing');
    control.socket!.send(JSON.stringify({ type: 'desired', instances: [], epoch: 4 } satisfies ControlMessage));
    await eventually(() => reports().includes('STOPPED') || undefined, 'a newer term\'s command taken');

    await link.close();
  });
});
