// Agent links through any replica (control/agents/relay.ts) on a NATS server of the test's own: a link an
// edge accepted while no replica held placement waits with its frames, and is relayed to the holder's side
// of the term once one is seen; frames go both ways whole, one larger than a NATS message in parts, pings
// and pongs too; a change of holder closes the link (1012) and ends it on the holder's side; what no replica
// signed is ignored. The test plays the holder's hub (what it serves is the hub's LinkSocket).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { WebSocket } from 'ws';
import { loadConfig } from '../src/config.ts';
import { createAccountsRepo } from '../src/control/accounts/repo.ts';
import { createAccountsService } from '../src/control/accounts/service.ts';
import type { LinkSocket } from '../src/control/agents/hub.ts';
import { createAgentEdge, serveRelayedLinks, type AgentEdge } from '../src/control/agents/relay.ts';
import { createNodesRepo } from '../src/control/clusters/nodes.ts';
import { createClustersRepo } from '../src/control/clusters/repo.ts';
import { createClustersService } from '../src/control/clusters/service.ts';
import { openDatabase } from '../src/database.ts';
import { createReplicaSigner } from '../src/invocation/replica-signing.ts';
import { createLogger } from '../src/logger.ts';
import type { Store } from '../src/store/store.ts';
import { tempDir } from './helpers/databases.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { until } from './helpers/wait.ts';

describe('agent links relayed to the placement holder', { skip: !natsServerAvailable() }, () => {
  const log = createLogger('silent');
  const signer = createReplicaSigner(randomBytes(32).toString('base64url'));
  let nats: TestNats;
  let nc: NatsConnection;
  let store: Store;
  let edge: AgentEdge;
  let server: http.Server;
  let credential: string;
  let clusterId: string;
  const served: { socket: LinkSocket; clusterId: string; frames: string[]; pongs: number; closed: boolean }[] = [];
  const link = () => ({ nc, subject: 'svc.agents', signer });

  before(async () => {
    nats = await startNats();
    nc = await nats.connect();
    store = await openDatabase({ dataDir: tempDir() });
    const accounts = createAccountsService(createAccountsRepo(store.db));
    const { account } = await accounts.ensureBootstrapAccount(loadConfig({}).api.accountBootstrap);
    const clusters = createClustersService(createClustersRepo(store.db, log), createNodesRepo(store.db, log), () => new Date());
    const registered = await clusters.registerLocal(account.ncaId, 'relayed', 'relayed-group', [{ name: 'L40S', capacity: 1, instanceTypes: [{ name: 'x' }] }]);
    ({ agentCredential: credential } = registered);
    clusterId = registered.row.id;
    edge = createAgentEdge({ link: link(), replicaId: 'edge-1', clusters, log });
    server = http.createServer();
    server.on('upgrade', (req, socket, head) => void edge.upgrade(req, socket, head));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });

  after(async () => {
    edge?.close();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    await store?.close();
    await nc?.close();
    await nats?.stop();
  });

  function holderSide(epoch: number) {
    return serveRelayedLinks(link(), epoch, (socket, cluster) => {
      const entry = { socket, clusterId: cluster, frames: [] as string[], pongs: 0, closed: false };
      socket.on('message', (text) => entry.frames.push(text));
      socket.on('pong', () => entry.pongs++);
      socket.on('close', () => { entry.closed = true; });
      served.push(entry);
    }, Promise.resolve(), log);
  }

  test('a refused credential never reaches NATS; a waiting link is relayed once a holder is seen, whole frames both ways, pings, then closed when the holder changes', async () => {
    const { port } = server.address() as AddressInfo;
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/agents/link`, { headers: { authorization: 'Bearer svcagent-wrong' } });
      ws.once('unexpected-response', (_req, response) => resolve(response.statusCode!));
    });
    assert.equal(refused, 401);

    const holder = holderSide(7);
    const agentFrames: string[] = [];
    const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/agents/link`, { headers: { authorization: `Bearer ${credential}` } });
    ws.on('message', (data) => agentFrames.push(data.toString()));
    await new Promise((resolve) => ws.once('open', resolve));
    ws.send('{"type":"hello"}');
    // No holder yet: the link waits with its hello.
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(served.length, 0);

    edge.holder(7);
    const [entry] = await until('the link served on the holder\'s side', async () => served.length === 1 && served);
    assert.equal(entry.clusterId, clusterId);
    await until('the waiting hello', async () => entry.frames.length === 1);
    assert.equal(entry.frames[0], '{"type":"hello"}');

    const big = JSON.stringify({ type: 'log-lines', text: 'é"\\'.repeat(200_000) });
    ws.send(big);
    entry.socket.send(big);
    await until('the large frame at the holder', async () => entry.frames.length === 2);
    assert.equal(entry.frames[1], big, 'joined whole, in order');
    await until('the large frame at the agent', async () => agentFrames.length === 1);
    assert.equal(agentFrames[0], big);
    entry.socket.ping();
    await until('the agent\'s pong relayed back', async () => entry.pongs === 1);

    // Forged on both subjects (no replica's signature): ignored.
    nc.publish('svc.agents.up.7', JSON.stringify({ kind: 'open', link: 'forged', edge: 'edge-1', clusterId }));
    nc.publish('svc.agents.down.edge-1', JSON.stringify({ kind: 'close', link: 'x', epoch: 7, code: 1000, reason: 'forged' }));
    await nc.flush();
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(served.length, 1);
    assert.equal(ws.readyState, ws.OPEN);

    const closed = new Promise<number>((resolve) => ws.once('close', resolve));
    edge.holder(8);
    assert.equal(await closed, 1012, 'the agent links again, to the new holder');
    await until('the link ended on the old holder\'s side', async () => entry.closed);
    holder.close();
  });
});
