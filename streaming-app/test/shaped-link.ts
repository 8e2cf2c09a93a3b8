// A shaped network link on this machine for tests and benchmarks: a network namespace (the browser's
// side) joined to the host by a veth pair, with a tbf qdisc on the host end so that everything the app
// sends to the browser crosses a bottleneck of a given rate and buffer, as on a real access link. Addresses
// come from 198.18.0.0/15, the range set aside for network benchmarks (RFC 2544). The browser runs inside
// the namespace through a small wrapper script; Playwright talks to it over a pipe, not the network.
// This kernel has no netem, so delay and loss are not emulated here (see bench/stream/network.ts).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { which } from './helpers.ts';

const run = promisify(execFile);

/** Why a shaped link cannot be made here, or false: root, ip and tc are needed. */
export function shapedLinkUnavailable(): string | false {
  // CI runs as root with iproute2: there the test runs, and a missing piece fails it instead of skipping it.
  if (process.env.CI) return false;
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  for (const tool of ['ip', 'tc']) if (!which(tool)) return `${tool} not installed (Debian package iproute2)`;
  return false;
}

/** tbf settings for a rate: a burst of ~4 ms (at least one full packet) and a 200 ms queue, a common access link. */
function tbfArgs(rateKbit: number): string[] {
  const burstBytes = Math.max(1600, Math.round((rateKbit * 1000) / 8 * 0.004));
  return ['tbf', 'rate', `${rateKbit}kbit`, 'burst', String(burstBytes), 'latency', '200ms'];
}

export class ShapedLink {
  readonly namespace: string;
  readonly hostDevice: string;
  readonly hostAddress: string;
  readonly peerAddress: string;
  readonly #dir: string;
  #rateKbit: number;

  private constructor(id: string, subnet: number, dir: string, rateKbit: number) {
    this.namespace = `svcnet${id}`;
    this.hostDevice = `svh${id}`;
    this.hostAddress = `198.18.${subnet}.1`;
    this.peerAddress = `198.18.${subnet}.2`;
    this.#dir = dir;
    this.#rateKbit = rateKbit;
  }

  static async create(rateKbit: number): Promise<ShapedLink> {
    const id = randomBytes(3).toString('hex');
    const subnet = randomBytes(1)[0];
    const link = new ShapedLink(id, subnet, await mkdtemp(join(tmpdir(), 'svc-link-')), rateKbit);
    const peer = `svp${id}`;
    try {
      await run('ip', ['netns', 'add', link.namespace]);
      await run('ip', ['link', 'add', link.hostDevice, 'type', 'veth', 'peer', 'name', peer]);
      await run('ip', ['link', 'set', peer, 'netns', link.namespace]);
      await run('ip', ['addr', 'add', `${link.hostAddress}/30`, 'dev', link.hostDevice]);
      await run('ip', ['link', 'set', link.hostDevice, 'up']);
      await run('ip', ['-n', link.namespace, 'addr', 'add', `${link.peerAddress}/30`, 'dev', peer]);
      await run('ip', ['-n', link.namespace, 'link', 'set', peer, 'up']);
      await run('ip', ['-n', link.namespace, 'link', 'set', 'lo', 'up']);
      // A default route through the host: a browser gathers candidates on its default route's interface,
      // and reaches the host's other local addresses this way (no forwarding involved).
      await run('ip', ['-n', link.namespace, 'route', 'add', 'default', 'via', link.hostAddress]);
      await run('tc', ['qdisc', 'add', 'dev', link.hostDevice, 'root', ...tbfArgs(rateKbit)]);
    } catch (error) {
      await link.destroy();
      throw error;
    }
    return link;
  }

  get rateKbit(): number {
    return this.#rateKbit;
  }

  /** Changes the bottleneck's rate in place (the queue is kept). */
  async setRate(rateKbit: number): Promise<void> {
    await run('tc', ['qdisc', 'change', 'dev', this.hostDevice, 'root', ...tbfArgs(rateKbit)]);
    this.#rateKbit = rateKbit;
  }

  /** An executable that runs `program` inside the namespace with the arguments it is given. */
  async wrapper(program: string): Promise<string> {
    const path = join(this.#dir, `in-${this.namespace}`);
    await writeFile(path, `#!/bin/sh\nexec ip netns exec ${this.namespace} ${program} "$@"\n`);
    await chmod(path, 0o700);
    return path;
  }

  /** Bytes and drops the bottleneck has counted so far. */
  async qdiscCounters(): Promise<{ sentBytes: number; dropped: number }> {
    const { stdout } = await run('tc', ['-s', 'qdisc', 'show', 'dev', this.hostDevice]);
    const sent = /Sent (\d+) bytes/.exec(stdout);
    const dropped = /dropped (\d+)/.exec(stdout);
    return { sentBytes: Number(sent?.[1] ?? 0), dropped: Number(dropped?.[1] ?? 0) };
  }

  async destroy(): Promise<void> {
    // Deleting the namespace removes its veth end, and with it the host end and the qdisc.
    await run('ip', ['link', 'del', this.hostDevice]).catch(() => undefined);
    await run('ip', ['netns', 'del', this.namespace]).catch(() => undefined);
    await rm(this.#dir, { recursive: true, force: true });
  }
}
