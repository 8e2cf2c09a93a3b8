// A shaped network link on this machine for tests and benchmarks, as a person's access link looks to a
// server: the browser's network namespace behind a router namespace, both joined by veth pairs,
//
//   host (app, hostAddress) ─veth─ router ─veth─ browser namespace (peerAddress)
//         tbf on this end                 └ TUN ─ socat ─ link-emulator.ts (delay, jitter, loss)
//
// A tbf qdisc on the host end makes everything the app sends to the browser cross a bottleneck of a given
// rate and buffer. This kernel has no netem, so delay, jitter and loss come from a userspace emulator in
// the router: while an impairment is set, policy routing sends every packet the router forwards (both
// ways) through a TUN device to link-emulator.ts and back. Without one, the router forwards in the kernel.
// Addresses come from 198.18.0.0/15, the range set aside for network benchmarks (RFC 2544). The browser
// runs inside its namespace through a small wrapper script; Playwright talks to it over a pipe.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { z } from 'zod';
import { which } from './helpers.ts';
import { NO_IMPAIRMENT, type Impairment } from './link-impairment.ts';

const run = promisify(execFile);
const EMULATOR = fileURLToPath(new URL('./link-emulator.ts', import.meta.url));
/** The router's policy-routing table that leads into the TUN. */
const TUN_TABLE = '100';

export type { Impairment } from './link-impairment.ts';

/** A link profile's impairment, the same both ways: `rttMs` is the round trip (half each way), jitter each way. */
export function symmetric(rttMs: number, jitterMs = 0, loss = 0): { down: Impairment; up: Impairment } {
  const one = { delayMs: rttMs / 2, jitterMs, loss };
  return { down: one, up: one };
}

/** Why a shaped link cannot be made here, or false: root, ip, tc and (for delay and loss) socat are needed. */
export function shapedLinkUnavailable(): string | false {
  // CI runs as root with iproute2 and socat: there the test runs, and a missing piece fails it instead of skipping it.
  if (process.env.CI) return false;
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  for (const [tool, pkg] of [['ip', 'iproute2'], ['tc', 'iproute2'], ['socat', 'socat']]) if (!which(tool)) return `${tool} not installed (Debian package ${pkg})`;
  return false;
}

/** tbf settings for a rate: a burst of ~4 ms (at least one full packet) and a 200 ms queue, a common access link. */
function tbfArgs(rateKbit: number): string[] {
  const burstBytes = Math.max(1600, Math.round((rateKbit * 1000) / 8 * 0.004));
  return ['tbf', 'rate', `${rateKbit}kbit`, 'burst', String(burstBytes), 'latency', '200ms'];
}

const directionStats = z.object({ passed: z.number(), dropped: z.number(), filtered: z.number(), lateMsTotal: z.number() });
const emulatorMessage = z.union([
  z.object({ ready: z.number().int() }),
  z.object({ impaired: z.literal(true) }),
  z.object({ stats: z.object({ down: directionStats, up: directionStats }) }),
]);
export type EmulatorStats = Extract<z.infer<typeof emulatorMessage>, { stats: unknown }>['stats'];

/** The emulator and socat, started on the first impairment. */
type Emulator = { node: ChildProcess; socat: ChildProcess };

export class ShapedLink {
  readonly namespace: string;
  readonly router: string;
  readonly hostDevice: string;
  readonly hostAddress: string;
  readonly peerAddress: string;
  readonly #routerAddress: string;
  readonly #routerInner: string;
  readonly #tun: string;
  readonly #seed: number;
  readonly #dir: string;
  #rateKbit: number;
  #emulator: Emulator | undefined;
  #impaired = false;

  private constructor(id: string, block: string, dir: string, rateKbit: number, seed: number) {
    this.namespace = `svcnet${id}`;
    this.router = `svcrt${id}`;
    this.hostDevice = `svh${id}`;
    this.#tun = `svt${id}`;
    // Two /30s in a block of eight: host +1 ─ router +2, router +5 ─ browser +6.
    const [prefix, base] = [block.slice(0, block.lastIndexOf('.')), Number(block.slice(block.lastIndexOf('.') + 1))];
    this.hostAddress = `${prefix}.${base + 1}`;
    this.#routerAddress = `${prefix}.${base + 2}`;
    this.#routerInner = `${prefix}.${base + 5}`;
    this.peerAddress = `${prefix}.${base + 6}`;
    this.#dir = dir;
    this.#rateKbit = rateKbit;
    this.#seed = seed;
  }

  /** A link at `rateKbit`; `seed` makes the emulator's loss and jitter draws repeatable. */
  static async create(rateKbit: number, seed = 1): Promise<ShapedLink> {
    const id = randomBytes(3).toString('hex');
    // One of 16384 blocks of eight addresses in 198.18.0.0/15, so that links made at once by parallel
    // test files do not share one.
    const [a, b] = randomBytes(2);
    const block = `198.${18 + (a & 1)}.${b}.${(a >> 1) * 8 % 256}`;
    const link = new ShapedLink(id, block, await mkdtemp(join(tmpdir(), 'svc-link-')), rateKbit, seed);
    try {
      await link.#build();
    } catch (error) {
      await link.destroy();
      throw error;
    }
    return link;
  }

  async #build(): Promise<void> {
    const { namespace, router, hostDevice } = this;
    const routerOuter = `svo${hostDevice.slice(3)}`;
    const routerInnerDevice = `svi${hostDevice.slice(3)}`;
    const peer = `svp${hostDevice.slice(3)}`;
    const inRouter = (...args: string[]) => run('ip', ['-n', router, ...args]);
    await run('ip', ['netns', 'add', router]);
    await run('ip', ['netns', 'add', namespace]);
    // IPv4 only: an IPv6 address finishing duplicate detection a second after the browser starts reads
    // to Chrome as a network change, and fails the page load it is in (ERR_NETWORK_CHANGED).
    for (const ns of [router, namespace]) {
      await run('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']);
    }
    await run('ip', ['link', 'add', hostDevice, 'type', 'veth', 'peer', 'name', routerOuter]);
    await run('ip', ['link', 'set', routerOuter, 'netns', router]);
    await run('ip', ['link', 'add', routerInnerDevice, 'netns', router, 'type', 'veth', 'peer', 'name', peer, 'netns', namespace]);
    await run('ip', ['addr', 'add', `${this.hostAddress}/30`, 'dev', hostDevice]);
    // The host's end too: its link-local address finishing detection would fail the page loads of every
    // Chromium on the host (other test files' among them).
    await run('ip', ['link', 'set', hostDevice, 'addrgenmode', 'none']);
    await run('ip', ['link', 'set', hostDevice, 'up']);
    // The host reaches the browser through the router (the route goes with the device).
    await run('ip', ['route', 'add', `${this.peerAddress}/32`, 'via', this.#routerAddress, 'dev', hostDevice]);
    await inRouter('addr', 'add', `${this.#routerAddress}/30`, 'dev', routerOuter);
    await inRouter('addr', 'add', `${this.#routerInner}/30`, 'dev', routerInnerDevice);
    for (const device of ['lo', routerOuter, routerInnerDevice]) await inRouter('link', 'set', device, 'up');
    await inRouter('route', 'add', 'default', 'via', this.hostAddress);
    // Forward, and accept packets the TUN hands back whatever interface their source is routed by.
    await run('ip', ['netns', 'exec', router, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.default.rp_filter=0']);
    await inRouter('tuntap', 'add', 'dev', this.#tun, 'mode', 'tun');
    await inRouter('link', 'set', this.#tun, 'up');
    await inRouter('route', 'add', 'default', 'dev', this.#tun, 'table', TUN_TABLE);
    await run('ip', ['-n', namespace, 'addr', 'add', `${this.peerAddress}/30`, 'dev', peer]);
    await run('ip', ['-n', namespace, 'link', 'set', peer, 'up']);
    await run('ip', ['-n', namespace, 'link', 'set', 'lo', 'up']);
    // A default route through the router: a browser gathers candidates on its default route's interface,
    // and reaches the host's other local addresses this way.
    await run('ip', ['-n', namespace, 'route', 'add', 'default', 'via', this.#routerInner]);
    await run('tc', ['qdisc', 'add', 'dev', hostDevice, 'root', ...tbfArgs(this.#rateKbit)]);
  }

  get rateKbit(): number {
    return this.#rateKbit;
  }

  /** Changes the bottleneck's rate in place (the queue is kept). */
  async setRate(rateKbit: number): Promise<void> {
    await run('tc', ['qdisc', 'change', 'dev', this.hostDevice, 'root', ...tbfArgs(rateKbit)]);
    this.#rateKbit = rateKbit;
  }

  /**
   * Delay, jitter and loss for each direction (down: towards the browser), from now on; NO_IMPAIRMENT for
   * both takes the emulator out of the path (the kernel forwards again). A `seed` starts the loss and
   * jitter draws over, so that two runs of one profile lose the same packets by number.
   */
  async impair(impairment: { down: Impairment; up: Impairment }, seed?: number): Promise<void> {
    const none = (i: Impairment) => i.delayMs === 0 && i.jitterMs === 0 && i.loss === 0 && !i.dropPayloadTypes?.length;
    if (none(impairment.down) && none(impairment.up)) {
      await this.#route(false);
      return;
    }
    const emulator = this.#emulator ?? await this.#startEmulator();
    emulator.node.send({ impair: impairment, seed });
    await this.#reply(emulator, 'impaired');
    await this.#route(true);
  }

  /** Packets the emulator passed and dropped each way, and how late (in total) its timers let them go. */
  async emulatorStats(): Promise<EmulatorStats | undefined> {
    const emulator = this.#emulator;
    if (!emulator) return undefined;
    emulator.node.send({ stats: true });
    const reply = await this.#reply(emulator, 'stats');
    return 'stats' in reply ? reply.stats : undefined;
  }

  /** Every packet the router forwards goes through the TUN (or no longer does). */
  async #route(on: boolean): Promise<void> {
    if (on === this.#impaired) return;
    const action = on ? 'add' : 'del';
    for (const device of [`svo${this.hostDevice.slice(3)}`, `svi${this.hostDevice.slice(3)}`]) {
      await run('ip', ['-n', this.router, 'rule', action, 'iif', device, 'table', TUN_TABLE]);
    }
    this.#impaired = on;
  }

  async #startEmulator(): Promise<Emulator> {
    const node = spawn('ip', ['netns', 'exec', this.router, process.execPath, EMULATOR, JSON.stringify({ browserAddress: this.peerAddress, seed: this.#seed })],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const partial: Emulator = { node, socat: undefined as unknown as ChildProcess };
    const ready = await this.#reply(partial, 'ready');
    const port = 'ready' in ready ? ready.ready : 0;
    // One datagram per packet each way: socat reads a packet from the TUN and sends it to the emulator,
    // and writes each datagram it gets back to the TUN (connected UDP: only from the emulator's port).
    const socat = spawn('ip', ['netns', 'exec', this.router, 'socat', '-b', '65536', `TUN,tun-name=${this.#tun},iff-no-pi`, `UDP:127.0.0.1:${port}`],
      { stdio: ['ignore', 'inherit', 'inherit'] });
    this.#emulator = { node, socat };
    await Promise.race([once(socat, 'spawn'), once(socat, 'error').then(([error]) => Promise.reject(error))]);
    await this.#tunAttached();
    return this.#emulator;
  }

  /**
   * Until socat has opened the TUN (its carrier comes up then): packets routed into it before are dropped,
   * which a loaded machine showed as the first datagrams of a run lost.
   */
  async #tunAttached(): Promise<void> {
    for (const started = Date.now(); Date.now() - started < 10_000; await new Promise((resolve) => setTimeout(resolve, 20))) {
      const { stdout } = await run('ip', ['-n', this.router, 'link', 'show', 'dev', this.#tun]);
      if (!stdout.includes('NO-CARRIER')) return;
    }
    throw new Error(`socat did not open ${this.#tun} within 10 s`);
  }

  /** The emulator's next message of a kind (it answers one request at a time). */
  async #reply(emulator: Emulator, kind: 'ready' | 'impaired' | 'stats'): Promise<z.infer<typeof emulatorMessage>> {
    const { node } = emulator;
    return new Promise((resolve, reject) => {
      const onMessage = (raw: unknown) => {
        const message = emulatorMessage.parse(raw);
        if (!(kind in message)) return;
        node.off('message', onMessage);
        node.off('exit', onExit);
        resolve(message);
      };
      const onExit = (code: number | null) => {
        node.off('message', onMessage);
        reject(new Error(`link emulator exited (${code}) before '${kind}'`));
      };
      node.on('message', onMessage);
      node.once('exit', onExit);
    });
  }

  /** An executable that runs `program` inside the namespace with the arguments it is given (its stderr to a file, if given). */
  async wrapper(program: string, stderrPath?: string): Promise<string> {
    const path = join(this.#dir, `in-${this.namespace}`);
    await writeFile(path, `#!/bin/sh\nexec ip netns exec ${this.namespace} ${program} "$@"${stderrPath ? ` 2>>'${stderrPath}'` : ''}\n`);
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
    const emulator = this.#emulator;
    this.#emulator = undefined;
    for (const child of [emulator?.socat, emulator?.node]) await stop(child);
    // Deleting the namespaces removes their veth ends, with them the host end, its qdisc and its route.
    await run('ip', ['link', 'del', this.hostDevice]).catch(() => undefined);
    await run('ip', ['netns', 'del', this.namespace]).catch(() => undefined);
    await run('ip', ['netns', 'del', this.router]).catch(() => undefined);
    await rm(this.#dir, { recursive: true, force: true });
  }
}

/** Ends a child we started, by its own pid only (never a group, never a pid of 0). */
async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const pid = child.pid;
  if (!pid || pid <= 0) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
  await exited;
  clearTimeout(timer);
}

export { NO_IMPAIRMENT };
