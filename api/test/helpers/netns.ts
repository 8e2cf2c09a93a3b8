// Two "hosts" on one machine for tests: network namespaces joined by veth pairs, made with `ip` and
// removed afterwards. The control plane's namespace has a link to the test (the host namespace) and a
// link to the agent's namespace; cutting the second is a network failure between the two hosts. Needs
// root and iproute2; outside CI their absence skips the test with one printed line.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { randomBytes, randomInt } from 'node:crypto';
import { promisify } from 'node:util';

const run = promisify(execFile);
const IP = '/usr/sbin/ip';

/** Why a test needing network namespaces is skipped, or false. Under CI it always runs. */
export function needsNetns(what: string): string | false {
  if (process.env.CI) return false;
  const reason = !existsSync(IP) ? 'needs iproute2 (Debian package iproute2)'
    : process.getuid?.() !== 0 ? 'needs root for ip netns' : undefined;
  if (reason) console.log(`# skipping ${what}: ${reason}`);
  return reason ?? false;
}

export interface Hosts {
  /** The control plane's namespace and its address as the test sees it. */
  control: { ns: string; address: string; addressForAgent: string };
  /** The agent's namespace and its address as the control plane sees it. */
  agent: { ns: string; address: string };
  /** argv prefix that runs a command inside a namespace. */
  exec(ns: string): string[];
  /** Takes the control-plane ↔ agent link down (both ends), or up again. */
  link(state: 'down' | 'up'): Promise<void>;
  /** Established TCP connections in a namespace from a local port to an address, as "local remote" pairs. */
  connections(ns: string, localPort: number, remoteAddress: string): Promise<string[]>;
  remove(): Promise<void>;
}

export async function createHosts(): Promise<Hosts> {
  const id = randomBytes(3).toString('hex');
  const control = `svc-cp-${id}`;
  const agent = `svc-ag-${id}`;
  // A random subnet for the link to the host namespace, so concurrent runs never share one.
  const [a, b] = [randomInt(200, 250), randomInt(0, 250)];
  const test = { host: `vh${id}`, control: `vc${id}`, subnet: `10.${a}.${b}` };
  const link = { control: `va${id}`, agent: `vb${id}`, subnet: `10.${a}.${b + 1}` };
  const ip = (...args: string[]) => run(IP, args);
  const inside = (ns: string, ...args: string[]) => ip('netns', 'exec', ns, IP, ...args);
  const hosts: Hosts = {
    control: { ns: control, address: `${test.subnet}.1`, addressForAgent: `${link.subnet}.1` },
    agent: { ns: agent, address: `${link.subnet}.2` },
    exec: (ns) => [IP, 'netns', 'exec', ns],
    async link(state) {
      await inside(control, 'link', 'set', link.control, state);
      await inside(agent, 'link', 'set', link.agent, state);
    },
    async connections(ns, localPort, remoteAddress) {
      const { stdout } = await run(IP, ['netns', 'exec', ns, '/usr/bin/ss', '-Htn', 'state', 'established', `( sport = :${localPort} )`, 'dst', remoteAddress]);
      return stdout.split('\n').filter(Boolean).map((line) => line.trim().split(/\s+/).slice(-2).join(' '));
    },
    async remove() {
      // Deleting a namespace deletes the veth ends inside it, and with them their peers.
      await ip('netns', 'del', control).catch(() => {});
      await ip('netns', 'del', agent).catch(() => {});
    },
  };
  try {
    await ip('netns', 'add', control);
    await ip('netns', 'add', agent);
    await ip('link', 'add', test.host, 'type', 'veth', 'peer', 'name', test.control, 'netns', control);
    await ip('addr', 'add', `${test.subnet}.2/24`, 'dev', test.host);
    await ip('link', 'set', test.host, 'up');
    await ip('link', 'add', link.control, 'netns', control, 'type', 'veth', 'peer', 'name', link.agent, 'netns', agent);
    await inside(control, 'addr', 'add', `${test.subnet}.1/24`, 'dev', test.control);
    await inside(control, 'addr', 'add', `${link.subnet}.1/24`, 'dev', link.control);
    await inside(agent, 'addr', 'add', `${link.subnet}.2/24`, 'dev', link.agent);
    for (const [ns, device] of [[control, test.control], [control, link.control], [agent, link.agent], [control, 'lo'], [agent, 'lo']]) {
      await inside(ns, 'link', 'set', device, 'up');
    }
    // A segment lost to a cut is resent within a second of the link coming back rather than after TCP's
    // back-off of up to two minutes; with resends that frequent, a connection (also one its program has
    // already closed, with a response still unsent) gives up only after some 100 of them, as it would
    // after minutes of back-off by default. Kernels without tcp_rto_max_ms keep their defaults.
    for (const ns of [control, agent]) {
      await run(IP, ['netns', 'exec', ns, '/usr/sbin/sysctl', '-qw',
        'net.ipv4.tcp_rto_max_ms=1000', 'net.ipv4.tcp_retries2=100', 'net.ipv4.tcp_orphan_retries=100']).catch(() => {});
    }
  } catch (error) {
    await hosts.remove();
    throw error;
  }
  return hosts;
}
