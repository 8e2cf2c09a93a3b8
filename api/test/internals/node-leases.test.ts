// Node leases (control/instances/leases.ts) on both stores, on a clock of the test's own: a node is
// registered once per cluster and name; a lease granted again while it runs keeps its generation, one
// granted after it lapsed gets the next (and an agent holding the old one is fenced); renewals keep it;
// a lease that runs out lapses once, telling placement; a stall of the process is not held against it;
// a cluster's capacity is its leased nodes' sum, else its declaration; after a restart every known node
// gets one lease period.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { ClusterRow } from '../../src/control/clusters/repo.ts';
import { createNodesRepo, isLive, type NodeRow } from '../../src/control/clusters/nodes.ts';
import { NodeLeases } from '../../src/control/instances/leases.ts';
import { openDatabase } from '../../src/database.ts';
import type { Store } from '../../src/store/store.ts';
import { createLogger } from '../../src/logger.ts';
import { createDatabase, postgresAvailable, type TestDatabase } from '../helpers/databases.ts';

const LEASE_MS = 3000;
const cluster = (id: string): ClusterRow => ({
  id, nca_id: 'acct', name: `cluster-${id}`, group_id: 'g', group_name: 'group', description: '', cloud_provider: 'ON-PREM',
  region: 'here', authorized_nca_ids: [], capabilities: [], attributes: [], agent_version: '0.1.0', agent_credential_hash: id,
  gpus: [{ name: 'L40S', capacity: 2, instanceTypes: [{ name: 'x' }] }], k8s_version: null, last_connected_at: null,
  unisolated_reason: null, created_at: '', updated_at: '',
});
const twoGpus = [{ name: 'L40S', capacity: 2, instanceTypes: [{ name: 'x' }] }];

for (const backend of ['sqlite', 'postgres'] as const) {
  describe(`node leases (${backend})`, { skip: backend === 'postgres' && !await postgresAvailable() }, () => {
    let database: TestDatabase;
    let store: Store;
    let clock = Date.parse('2026-01-01T00:00:00.000Z');
    const lapsed: string[] = [];
    const log = createLogger('silent');
    const leasesOn = (repo: ReturnType<typeof createNodesRepo>) => new NodeLeases({
      repo, leaseMs: LEASE_MS, now: () => new Date(clock), log, onLapse: async (node: NodeRow) => void lapsed.push(node.name),
    });

    /** Moves the clock as the process would live it: a sweep every half second. */
    async function advance(leases: NodeLeases, ms: number) {
      for (let left = ms; left > 0; left -= 500) {
        clock += Math.min(500, left);
        await leases.sweep();
      }
    }

    after(async () => {
      await store?.close();
      await database?.drop();
    });

    test('grant, renew, lapse, grant again, fence; capacity; a restart\'s grace', async () => {
      database = await createDatabase(backend);
      store = await openDatabase({ dataDir: database.dataDir, databaseUrl: database.databaseUrl });
      const repo = createNodesRepo(store.db, log);
      const leases = leasesOn(repo);
      await leases.start();
      try {
        const c1 = cluster('c1');
        assert.equal(leases.capacity(c1, 'L40S'), 2, 'no node yet: the declaration');
        const a = await leases.grant(c1, { name: 'a', gpus: twoGpus, agentVersion: '0.1.0' });
        const b = await leases.grant(c1, { name: 'b', gpus: twoGpus, agentVersion: '0.1.0' });
        assert.deepEqual([a.grant.generation, a.renewed, a.fenced, b.grant.generation], [1, false, false, 1]);
        assert.notEqual(a.node.id, b.node.id, 'two names, two nodes');
        assert.equal(leases.capacity(c1, 'L40S'), 4, 'the nodes\' sum');
        assert.deepEqual(leases.linkedIn('c1').map((node) => node.name), ['a', 'b']);

        const again = await leases.grant(c1, { name: 'a', held: { nodeId: a.node.id, generation: 1 }, gpus: twoGpus, agentVersion: '0.1.0' });
        assert.deepEqual([again.node.id, again.grant.generation, again.renewed, again.fenced], [a.node.id, 1, true, false], 'a reconnect within the lease');

        await advance(leases, LEASE_MS - 100);
        leases.renew(a.node.id);
        await leases.unlinked(b.node.id);
        assert.deepEqual(leases.linkedIn('c1').map((node) => node.name), ['a']);
        const stored = await repo.listByCluster('c1');
        assert.deepEqual(stored.map((node) => [node.name, isLive(node, new Date(clock))]), [['a', true], ['b', false]], 'the store says which link is live');
        await advance(leases, 200);
        assert.deepEqual(lapsed, ['b'], 'b ran out; a was renewed');
        await leases.sweep();
        assert.deepEqual(lapsed, ['b'], 'a lease lapses once');
        assert.equal(leases.capacity(c1, 'L40S'), 2, 'a lapsed node counts no more');

        const back = await leases.grant(c1, { name: 'b', held: { nodeId: b.node.id, generation: 1 }, gpus: twoGpus, agentVersion: '0.1.0' });
        assert.deepEqual([back.grant.generation, back.renewed, back.fenced], [2, false, true], 'after a lapse: the next generation, the agent fenced');

        // A stall of this process as long as two leases: nobody lapses for it.
        clock += 2 * LEASE_MS;
        await leases.sweep();
        assert.deepEqual(lapsed, ['b']);
      } finally {
        leases.stop();
      }

      // A restart: the known nodes get one lease period to link again, then lapse.
      const restarted = leasesOn(repo);
      await restarted.start();
      try {
        assert.equal((await repo.listByCluster('c1')).some((node) => node.linked === 1), false, 'no link is open after a restart');
        const a = await restarted.grant(cluster('c1'), { name: 'a', held: { nodeId: (await repo.listByCluster('c1'))[0].id, generation: 1 }, gpus: twoGpus, agentVersion: '0.1.0' });
        assert.deepEqual([a.grant.generation, a.renewed, a.fenced], [1, true, false], 'back within the grace: nothing lost');
        await advance(restarted, LEASE_MS + 1);
        assert.deepEqual(lapsed.slice(1).sort(), ['a', 'b'], 'b never came back and a was not renewed');
        assert.deepEqual([restarted.abandoned('c1'), restarted.capacity(cluster('c1'), 'L40S')], [true, 0], 'no node left: nothing new goes there');
        assert.deepEqual([restarted.abandoned('c2'), restarted.capacity(cluster('c2'), 'L40S')], [false, 2], 'a cluster no agent linked yet waits for one');
      } finally {
        restarted.stop();
      }
    });
  });
}
