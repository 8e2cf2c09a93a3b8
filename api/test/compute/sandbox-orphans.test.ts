// Sandbox networks of an agent that died with its state dir (kill -9, then its temporary dir removed): the
// next agent to start on the host ends them, by the host-wide marks, and leaves those of live agents and
// those being claimed right now. Real namespaces (iproute2) and a real agent-like child process.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { after, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { removeOrphanNetworks } from '../../src/compute/sandbox/network.ts';
import { needsSandbox } from '../helpers/sandbox.ts';

const run = promisify(execFile);
const skip = needsSandbox('sandbox network clean-up');
const options = { ip: '/usr/sbin/ip', nft: '/usr/sbin/nft', subnet: '10.213.0.0' };
const NETWORK_MODULE = new URL('../../src/compute/sandbox/network.ts', import.meta.url).href;

/** A child process that claims one sandbox network the way an agent does and prints its namespace. */
async function agentWithNetwork() {
  const child = spawn(process.execPath, ['--input-type=module', '-e', `
    const { createNetwork } = await import(${JSON.stringify(NETWORK_MODULE)});
    const net = await createNetwork(${JSON.stringify(options)});
    console.log(net.namespace);
    setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = await once(child.stdout!, 'data') as [Buffer];
  return { child, namespace: line.toString().trim() };
}

const exists = (namespace: string) => existsSync(`/run/netns/${namespace}`);

describe('sandbox networks of agents no longer running', { skip }, () => {
  const made: string[] = [];
  after(async () => {
    for (const namespace of made) {
      await run('/usr/sbin/ip', ['netns', 'del', namespace]).catch(() => {});
      await rm(`/run/svc-sandbox/slots/${namespace.slice('svcs-'.length)}`, { force: true });
    }
  });

  test('a killed agent\'s networks are ended; a live agent\'s and a fresh unmarked one are kept', async () => {
    const dead = await agentWithNetwork();
    const live = await agentWithNetwork();
    made.push(dead.namespace, live.namespace);
    dead.child.kill('SIGKILL');
    await once(dead.child, 'exit');
    // A namespace another agent has just added and not marked yet.
    const fresh = `svcs-${16_000 + Math.floor(Math.random() * 300)}`;
    await run('/usr/sbin/ip', ['netns', 'add', fresh]);
    made.push(fresh);
    try {
      assert.ok(await removeOrphanNetworks(options) >= 1);
      assert.equal(exists(dead.namespace), false, `${dead.namespace} of the killed agent is still there`);
      assert.equal(exists(live.namespace), true, `${live.namespace} of the live agent was removed`);
      assert.equal(exists(fresh), true, 'an unmarked namespace younger than the grace was removed');
    } finally {
      live.child.kill('SIGKILL');
    }
  });
});
