// Placement's parts (control/instances): targets and waking from zero, choosing a cluster or saying why
// not, the scale-down order, desired sets compared by fingerprint before any spec is built, ready sets,
// and the instances held (on the real store).
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { InstanceSpec } from '../../src/compute/protocol.ts';
import type { NodeRow } from '../../src/control/clusters/nodes.ts';
import type { ClusterRow } from '../../src/control/clusters/repo.ts';
import type { GpuSpecification } from '../../src/control/deployments/schema.ts';
import { AgentLinks, fingerprintOf, type AgentChannel } from '../../src/control/instances/agents.ts';
import { capacityOf, chooseCluster, chooseNode, victimsOf, type ClusterUse } from '../../src/control/instances/choose.ts';
import { PlacedInstances } from '../../src/control/instances/placed.ts';
import { readyOf } from '../../src/control/instances/ready.ts';
import { createInstancesRepo, type InstanceRow } from '../../src/control/instances/repo.ts';
import { Demand, targetsOf, wakeSpecOf } from '../../src/control/instances/targets.ts';
import { openDatabase } from '../../src/database.ts';
import { createDatabase } from '../helpers/databases.ts';

const spec = (id: string, fields: Partial<GpuSpecification> = {}): GpuSpecification => ({
  gpuSpecificationId: id, gpu: 'L40', instanceType: 'x', minInstances: 0, maxInstances: 4, maxRequestConcurrency: 1, ...fields,
});
const cluster = (id: string, fields: Partial<ClusterRow> = {}): ClusterRow => ({
  id, nca_id: 'acct', name: `cluster-${id}`, group_id: 'g', group_name: 'group', description: '', cloud_provider: 'ON-PREM',
  region: 'here', authorized_nca_ids: [], capabilities: [], attributes: [], agent_version: '0.1.0', agent_credential_hash: id,
  gpus: [{ name: 'L40', capacity: 2, instanceTypes: [{ name: 'x' }] }], k8s_version: null, last_connected_at: null,
  unisolated_reason: null, created_at: '', updated_at: '', ...fields,
});
const instance = (id: string, fields: Partial<InstanceRow> = {}): InstanceRow => ({
  instance_id: id, nca_id: 'acct', function_id: 'f', version_id: 'v', cluster_id: 'c1', gpu_spec_id: 's1', gpu: 'L40',
  instance_type: 'x', state: 'RUNNING', desired: 1, endpoint: null, restarts: 0, message: null, node_id: null,
  created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z', ...fields,
});
const use = (held: Record<string, number>, connected: string[] = []): ClusterUse => ({
  held: (clusterId) => held[clusterId] ?? 0, load: (clusterId) => held[clusterId] ?? 0, connected: (clusterId) => connected.includes(clusterId),
  capacity: capacityOf,
});
const node = (id: string, gpus: NodeRow['gpus'] = [], fields: Partial<NodeRow> = {}): NodeRow => ({
  id, cluster_id: 'c1', name: id, gpus, agent_version: '0.1.0', generation: 1, linked: 1, lease_expires_at: null, created_at: '', updated_at: '', ...fields,
});
const noQuota = { held: 0, limit: Number.POSITIVE_INFINITY };

test('targets: the autoscaler\'s count, else the minimum, always within the bounds', () => {
  const specs = [spec('a', { minInstances: 1, maxInstances: 3 }), spec('b', { minInstances: 0, maxInstances: 2 }), spec('c', { minInstances: 2 })];
  assert.deepEqual([...targetsOf(specs)], [['a', 1], ['b', 0], ['c', 2]]);
  assert.deepEqual([...targetsOf(specs, new Map([['a', 9], ['b', 1], ['c', 0]]))], [['a', 3], ['b', 1], ['c', 2]]);
});

test('waking from zero: the lowest preferredOrder, the first listed on a tie; none while some target is above zero', () => {
  const specs = [spec('a', { preferredOrder: 5 }), spec('b', { preferredOrder: 2 }), spec('c', { preferredOrder: 2 })];
  assert.equal(wakeSpecOf(targetsOf(specs), specs)?.gpuSpecificationId, 'b');
  assert.equal(wakeSpecOf(targetsOf([spec('a'), spec('b')]), [spec('a'), spec('b')])?.gpuSpecificationId, 'a', 'unset counts as 100');
  assert.equal(wakeSpecOf(new Map([['a', 0], ['b', 1]]), specs), undefined);
});

test('demand: only a version that starts to wait says so; it is remembered for the idle window', () => {
  const demand = new Demand();
  assert.deepEqual([demand.set('v', 2, 1000), demand.set('v', 3, 1500), demand.set('v', 0, 2000), demand.set('v', 1, 2500)], [true, false, false, true]);
  assert.equal(demand.waiting('v'), true);
  demand.set('v', 0, 3000);
  assert.equal(demand.waiting('v'), false);
  assert.deepEqual([demand.within('v', 3000, 600), demand.within('v', 3100, 600)], [true, false], 'last demand at 2500');
  demand.keepOnly(new Map());
  assert.equal(demand.within('v', 2500, 600), false, 'forgotten once undeployed');
});

test('choosing a cluster: connected first, then the least loaded; full clusters are passed over', () => {
  const clusters = [cluster('c1'), cluster('c2'), cluster('c3')];
  assert.equal((chooseCluster('acct', spec('s'), clusters, use({ c1: 0, c2: 1, c3: 0 }, ['c2', 'c3']), noQuota) as ClusterRow).id, 'c3');
  assert.equal((chooseCluster('acct', spec('s'), clusters, use({ c1: 0, c2: 1, c3: 2 }, ['c2', 'c3']), noQuota) as ClusterRow).id, 'c2');
  const unbounded = cluster('c4', { gpus: [{ name: 'L40', instanceTypes: [{ name: 'x' }] }] });
  assert.equal((chooseCluster('acct', spec('s'), [unbounded], use({ c4: 1000 }), noQuota) as ClusterRow).id, 'c4', 'no capacity declared');
});

test('choosing a cluster: why not, in placement\'s words', () => {
  const clusters = [cluster('c1'), cluster('c2', { nca_id: 'other' })];
  assert.equal(chooseCluster('acct', spec('s'), clusters, use({}), { held: 3, limit: 3 }),
    'account quota: 3 of 3 instances in use (maxInstancesAllowed)');
  assert.equal(chooseCluster('acct', spec('s', { gpu: 'H100' }), clusters, use({}), noQuota),
    'no cluster the account may use offers GPU H100 with instance type x');
  assert.equal(chooseCluster('acct', spec('s'), clusters, use({ c1: 2 }), noQuota), 'no capacity: L40 on cluster cluster-c1: 2 of 2 in use');
});

test('scaling down: not ready first, then idle, those in a session last; the youngest first within each', () => {
  const rows = [
    instance('old-idle', { created_at: '1' }), instance('young-idle', { created_at: '3' }), instance('session', { created_at: '4' }),
    instance('starting', { state: 'STARTING', created_at: '2' }),
  ];
  const order = (excess: number) => victimsOf(rows, excess, (id) => id === 'session').map((row) => row.instance_id);
  assert.deepEqual(order(4), ['starting', 'young-idle', 'old-idle', 'session']);
  assert.deepEqual(order(1), ['starting']);
  assert.deepEqual(order(0), []);
  assert.deepEqual(order(-1), []);
  assert.deepEqual(rows.map((row) => row.instance_id)[0], 'old-idle', 'the held list keeps its order');
});

test('desired sets: compared by fingerprint, so an unchanged set is neither built nor sent; a new link gets the whole set', async () => {
  const sent: { to: string; ids: string[] }[] = [];
  const closed: string[] = [];
  const channel = (to: string): AgentChannel => ({
    sendDesired: (specs) => void sent.push({ to, ids: specs.map((spec) => spec.instanceId) }), close: () => void closed.push(to),
  });
  const held = new Map([['c1', [instance('i1'), instance('i2')]], ['c2', [] as InstanceRow[]]]);
  let built = 0;
  const build = async (rows: InstanceRow[]) => {
    built++;
    return rows.map((row) => ({ instanceId: row.instance_id }) as InstanceSpec);
  };
  const links = new AgentLinks();
  const first = channel('first');
  assert.equal(links.connect('c1', first), false);
  links.connect('c2', channel('c2'));
  const push = () => links.push((clusterId) => held.get(clusterId) ?? [], build);
  await push();
  await push();
  assert.deepEqual(sent, [{ to: 'first', ids: ['i1', 'i2'] }, { to: 'c2', ids: [] }]);
  assert.equal(built, 2, 'the second push built nothing');

  held.set('c1', [instance('i2')]);
  assert.equal(links.connect('c1', channel('second')), true, 'a reconnect replaces the older link');
  assert.equal(links.disconnect('c1', first), false, 'the stale link\'s disconnect leaves the new one');
  await push();
  assert.deepEqual(sent.slice(2), [{ to: 'second', ids: ['i2'] }]);
  links.drop('c1');
  assert.deepEqual(closed, ['second'], 'a lapsed lease ends the node\'s link');
  await push();
  assert.equal(sent.length, 3, 'nothing more goes to a dropped link');
  assert.equal(fingerprintOf([instance('a'), instance('b')]) === fingerprintOf([instance('b'), instance('a')]), false);
});

test('ready sets: running instances with an endpoint, with their specification\'s concurrency and their cluster\'s group and region', () => {
  const endpoint = { host: '127.0.0.1', ports: { inference: 9000, health: 9000 } };
  const rows = [
    instance('ready', { endpoint, gpu_spec_id: 's2' }), instance('no-endpoint'), instance('starting', { state: 'STARTING', endpoint }),
    instance('other-spec', { endpoint, cluster_id: 'gone', gpu_spec_id: 'gone' }),
  ];
  const ready = readyOf('v', rows, [spec('s2', { maxRequestConcurrency: 8 })], new Map([['c1', cluster('c1')]]));
  assert.deepEqual(ready.map(({ instanceId, maxRequestConcurrency, backend, region }) => ({ instanceId, maxRequestConcurrency, backend, region })), [
    { instanceId: 'ready', maxRequestConcurrency: 8, backend: 'group', region: 'here' },
    { instanceId: 'other-spec', maxRequestConcurrency: 1, backend: '', region: '' },
  ]);
});

const database = await createDatabase('sqlite');
const store = await openDatabase({ dataDir: database.dataDir });
after(async () => {
  await store.close();
  await database.drop();
});

test('instances held: a restart forgets what agents said; reports fold in once; finished ones leave, orphaned ones stop', async () => {
  const repo = createInstancesRepo(store.db);
  const endpoint = { host: '127.0.0.1', ports: { inference: 9000, health: 9001 } };
  await store.db.insertInto('accounts').values({
    nca_id: 'acct', name: 'acct', admin_client_ids: '[]', max_functions: 1, max_tasks: 1, max_telemetries: 1,
    max_registry_credentials: 1, max_instances: 9, max_assets: 1, max_asset_bytes: 1, created_at: '', updated_at: '',
  }).execute();
  for (const row of [instance('running', { endpoint }), instance('stopped', { desired: 0, state: 'STOPPED' }), instance('orphan', { gpu_spec_id: 'gone' })]) {
    await repo.insert(row);
  }
  const placed = new PlacedInstances(repo);
  await placed.load();
  assert.deepEqual([...placed.all()].map((row) => [row.instance_id, row.state, row.endpoint]),
    [['running', 'PENDING', null], ['stopped', 'PENDING', null], ['orphan', 'PENDING', null]]);

  const report = { instanceId: 'running', functionVersionId: 'v', state: 'RUNNING' as const, restarts: 0, endpoint, updatedAt: 't1' };
  assert.equal(await placed.apply({ id: 'n2', clusterId: 'c2' }, report, 't1'), false, 'another cluster\'s report');
  assert.equal(await placed.apply({ id: 'n1', clusterId: 'c1' }, report, 't1'), true, 'adopted by the node that reports it');
  assert.equal(placed.get('running')?.node_id, 'n1');
  assert.equal(await placed.apply({ id: 'n1', clusterId: 'c1' }, report, 't2'), false, 'nothing changed');
  assert.equal(await placed.apply({ id: 'n3', clusterId: 'c1' }, { ...report, restarts: 1 }, 't2'), false, 'another node of the cluster');
  assert.deepEqual(placed.get('running')?.endpoint, endpoint);

  const deployment = { deployment_id: 'd', function_id: 'f', version_id: 'v', nca_id: 'acct', created_at: '', updated_at: '', specs: [spec('s1')] };
  await placed.dropFinished(new Map([['v', deployment]]), 't3');
  assert.deepEqual([...placed.all()].map((row) => [row.instance_id, row.desired]), [['running', 1], ['orphan', 0]]);
  assert.deepEqual((await repo.listAll()).map((row) => [row.instance_id, row.desired, row.state]), [['running', 1, 'RUNNING'], ['orphan', 0, 'RUNNING']]);
  assert.deepEqual([placed.countOn('c1'), placed.countOn('c1', 'L40'), placed.countOn('c1', 'H100'), placed.hasVersion('v')], [1, 1, 0, true]);
});

test('nodes: a new instance goes to the linked node with the most room, the least loaded on a tie; none without room', () => {
  const counts: Record<string, number> = { a: 1, b: 0, c: 0 };
  const linked = [node('a', [{ name: 'L40', capacity: 2, instanceTypes: [] }]), node('b', [{ name: 'L40', capacity: 2, instanceTypes: [] }])];
  const nodeUse = { linked: () => linked, countOn: (nodeId: string) => counts[nodeId] ?? 0 };
  assert.equal(chooseNode('c1', 'L40', nodeUse), 'b', 'b has two free, a one');
  counts.b = 1;
  assert.equal(chooseNode('c1', 'L40', nodeUse), 'a', 'equal room: the first listed');
  counts.a = 2;
  counts.b = 2;
  assert.equal(chooseNode('c1', 'L40', nodeUse), null, 'both full');
  assert.equal(chooseNode('c1', 'OTHER', nodeUse), 'a', 'a GPU the nodes give no count for: the least loaded (the cluster bounds it)');
  assert.equal(chooseNode('c1', 'L40', { linked: () => [], countOn: () => 0 }), null, 'no linked node: the instance waits');
});

test('instances held: LOST with their node\'s lapsed lease, no longer desired; only their end is taken from a returning agent', async () => {
  const repo = createInstancesRepo(store.db);
  await repo.insert(instance('on-n1', { node_id: 'm1' }));
  await repo.insert(instance('on-n2', { node_id: 'm2' }));
  const placed = new PlacedInstances(repo);
  await placed.load();
  const lost = await placed.lose('m1', 't1');
  assert.deepEqual(lost.map((row) => row.instance_id), ['on-n1']);
  assert.deepEqual([placed.get('on-n1')?.state, placed.get('on-n1')?.desired, placed.countOnNode('m1'), placed.countOnNode('m2')], ['LOST', 0, 0, 1]);
  const report = { instanceId: 'on-n1', functionVersionId: 'v', state: 'RUNNING' as const, restarts: 0, updatedAt: 't2' };
  assert.equal(await placed.apply({ id: 'm1', clusterId: 'c1' }, report, 't2'), false, 'a LOST instance never runs again');
  assert.equal(await placed.apply({ id: 'm1', clusterId: 'c1' }, { ...report, state: 'STOPPED' }, 't2'), true, 'its end is taken');
  const deployed = new Map([['v', { deployment_id: 'd', function_id: 'f', version_id: 'v', nca_id: 'acct', created_at: '', updated_at: '', specs: [spec('s1')] }]]);
  await placed.dropFinished(deployed, 't3');
  assert.equal(placed.get('on-n1'), undefined, 'and then it is gone');

  await placed.lose('m2', '2026-01-01T00:00:00.000Z');
  await placed.dropFinished(deployed, '2026-01-01T00:59:00.000Z');
  assert.equal(placed.get('on-n2')?.state, 'LOST', 'kept while its node may come back');
  await placed.dropFinished(deployed, '2026-01-01T01:00:00.000Z');
  assert.equal(placed.get('on-n2'), undefined, 'forgotten an hour later');
});
