// The process runtime's sandbox: each instance (or task) runs as a user of its own, in namespaces of its
// own (bwrap.ts), on a network of its own (network.ts), inside a cgroup with its instance type's caps
// (cgroups.ts). What starts it is one argv:
//
//   unshare --mount -- sh -c <launcher> <stage> <cgroup.procs files> -- <read-only paths> <work dir> <writable dirs> --
//      nsenter --net=<its namespace> -S uid -G gid -- bwrap <its view> -- <the catalog's command>
//
// The launcher, still root, joins the cgroup (so nothing of the instance runs outside it), then, in the
// mount namespace unshare made for it alone, bind-mounts what the instance sees of the host (the read-only
// paths, its work dir, the directories it writes) at <stage>/0, 1, … on a fresh tmpfs: bwrap runs as the
// instance's user, which may have no way through their parents (the agent's 0700 state dir, a private
// checkout), and these mounts vanish with the namespace. nsenter enters its network as root
// and drops to its user; bwrap builds the rest. The agent signals and kills an instance through its
// cgroup, which holds every process it made, whatever sessions or namespaces they moved to.
//
// A file per instance (<stateDir>/sandboxes/<instance>.json) names its network slot and published ports, so
// a restarted agent ends what its crashed run left: the processes of its cgroups, their namespaces and
// ports, the cgroups. Network namespaces of agents that died with their state dir go too (network.ts).
import { execFile } from 'node:child_process';
import { constants, existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import type { Logger } from '../../logger.ts';
import type { Limits } from '../limits.ts';
import { chmodOpened, openToInstance, type InstanceFiles } from '../instance-files.ts';
import { UnstartableError } from '../runtime.ts';
import { bwrapArguments, isWithin } from './bwrap.ts';
import { cgroupLayout, InstanceCgroup, leftoverCgroups, type CgroupLayout } from './cgroups.ts';
import {
  createNetwork, enableForwarding, installFirewall, publish, removeNetwork, removeOrphanNetworks, unpublish, type NetworkOptions,
  type Published, type SandboxNetwork,
} from './network.ts';

const run = promisify(execFile);

/**
 * $1: the stage, $2 and $3: mount and mkdir (by path: the agent's PATH may lack them, and setting PATH here
 * would change the instance's); then cgroup.procs files to join, `--`, directories to stage at $1/0, $1/1,
 * …, `--`, and the command. Exits 125 (before running anything of the instance) when a step fails.
 */
const LAUNCHER = [
  'stage=$1; mount=$2; mkdir=$3; shift 3',
  'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift',
  '"$mount" -t tmpfs -o mode=0755,size=64k svc-stage "$stage" || exit 125',
  'i=0; while [ "$1" != -- ]; do "$mkdir" "$stage/$i" && "$mount" --bind "$1" "$stage/$i" || exit 125; i=$((i+1)); shift; done; shift',
  'exec "$@"',
].join('\n');
/** Where the launcher stages an instance's directories, in its own mount namespace (an empty directory on the host). */
const STAGE = '/run/svc-sandbox-stage';

export interface SandboxOptions {
  /** Host paths instances see read-only besides the system's: the catalog's programs and what they load. */
  readOnly: string[];
  /** Platform paths under `readOnly` that instances must not see. */
  hidden: string[];
  subnet: string;
  uidBase: number;
  /** Host TCP ports a sandbox may open (the gateway's public port), beside answers to the host's connections. */
  doors: number[];
  /** The address the agent advertises when it is not loopback: instances' ports are then published on the host. */
  advertise?: string;
  /** Marks this agent's cgroups (its state dir's tag). */
  agentTag: string;
  stateDir: string;
  log: Logger;
}

/** What one sandboxed start needs from the runtime. */
export interface SandboxRequest {
  /** The instance's name as a file name: its cgroup's and its record's. */
  fileName: string;
  command: string[];
  cwd: string;
  /** Its work dir, seen read-only, and what of it is the instance's (instance-files.ts). */
  workDir: string;
  files: InstanceFiles;
  limits: Limits;
  /** Its ports, published on the host when the agent advertises a host address. */
  ports: Published;
}

export interface SandboxedLaunch {
  argv: string[];
  /** The environment the sandbox sets (HOME and TMPDIR on its own tmpfs). */
  env: Record<string, string>;
  /** Where the invocation plane reaches it: its own address, or the advertised one where its ports are published. */
  host: string;
  /** Signals every process of the instance but those in `spare` (bwrap's monitor, which would end without waiting). */
  signal(signal: NodeJS.Signals, spare?: number[]): Promise<void>;
  /** Whether the kernel killed a process of it for memory. */
  outOfMemory(): Promise<boolean>;
  /** Kills what is left and frees its cgroup, network and record. */
  release(): Promise<void>;
}

export interface Sandbox {
  prepare(request: SandboxRequest): Promise<SandboxedLaunch>;
  /** Ends what an earlier run of this agent left: processes, cgroups, network namespaces. */
  cleanup(): Promise<void>;
  /** Once its instances have ended: removes this agent's cgroup directories. */
  close(): Promise<void>;
}

interface Tools {
  sh: string;
  mount: string;
  mkdir: string;
  unshare: string;
  nsenter: string;
  bwrap: string;
  ip: string;
  nft: string;
}

const recordSchema = z.object({
  slot: z.number().int().min(0),
  published: z.object({ tcp: z.array(z.number().int()), udp: z.array(z.number().int()) }).optional(),
});

/** A sandbox for this host, or why there can be none (one line for the banner). */
export async function openSandbox(options: SandboxOptions): Promise<Sandbox | { unavailable: string }> {
  if (process.getuid?.() !== 0) return { unavailable: 'the agent does not run as root (it makes network namespaces and cgroups)' };
  const tools = findTools();
  if ('missing' in tools) return { unavailable: `${tools.missing} is not installed (Debian: bubblewrap nftables iproute2 util-linux)` };
  await mkdir(STAGE, { recursive: true, mode: 0o755 });
  const layout = cgroupLayout(options.agentTag);
  if ('unavailable' in layout) return layout;
  const network: NetworkOptions = { ip: tools.ip, nft: tools.nft, subnet: options.subnet };
  try {
    await run(tools.nsenter, ['-S', String(options.uidBase), '-G', String(options.uidBase), '--', tools.bwrap,
      '--unshare-user', '--unshare-pid', '--disable-userns', '--ro-bind', '/', '/', '--', '/bin/true']);
    await installFirewall(network, options.doors);
    if (options.advertise) await enableForwarding();
  } catch (error) {
    return { unavailable: `the sandbox does not work on this host: ${firstLine(error)}` };
  }
  return createSandbox(options, tools, layout, network);
}

function createSandbox(options: SandboxOptions, tools: Tools, layout: CgroupLayout, network: NetworkOptions): Sandbox {
  const records = path.join(options.stateDir, 'sandboxes');
  const recordOf = (fileName: string) => path.join(records, `${fileName}.json`);
  const spareName = (slot: number) => `spare-${slot}`;
  /**
   * A network made ahead, so that a start need not wait the ~40 ms of `ip` for one. It has a record of its
   * own (spare-<slot>), renamed to the instance's when taken, so exactly one record names a slot.
   */
  let spare: Promise<SandboxNetwork | undefined> | undefined;
  /** Closed: no more spares (a start racing the agent's stop would leave one no record of a live agent names). */
  let closed = false;

  function makeSpare(): void {
    if (closed) return;
    spare = createNetwork(network).then(async (net) => {
      await mkdir(records, { recursive: true, mode: 0o700 });
      await writeFile(recordOf(spareName(net.slot)), JSON.stringify({ slot: net.slot }), { mode: 0o600 });
      return net;
    }).catch((error: unknown) => {
      options.log.warn({ err: error }, 'no sandbox network made ahead');
      return undefined;
    });
  }

  /** The spare network (its record now the instance's), or a new one; another spare is started either way. */
  async function networkFor(fileName: string): Promise<SandboxNetwork> {
    const ready = spare;
    makeSpare();
    const net = await ready;
    if (!net) return createNetwork(network);
    await rename(recordOf(spareName(net.slot)), recordOf(fileName));
    return net;
  }

  async function prepare(request: SandboxRequest): Promise<SandboxedLaunch> {
    const visible = options.readOnly;
    if (!isWithin(request.cwd, visible) || (path.isAbsolute(request.command[0]) && !isWithin(request.command[0], visible))) {
      throw new UnstartableError(`${request.command[0]} (in ${request.cwd}) is outside what sandboxed instances see: add its directory to compute.agent.sandboxReadOnlyPaths`);
    }
    const cgroup = new InstanceCgroup(layout, request.fileName);
    await cgroup.create(request.limits);
    const net = await networkFor(request.fileName).catch(async (error: unknown) => {
      await cgroup.remove();
      throw error;
    });
    const uid = options.uidBase + net.slot;
    const published = options.advertise ? request.ports : undefined;
    try {
      await mkdir(records, { recursive: true, mode: 0o700 });
      await writeFile(recordOf(request.fileName), JSON.stringify({ slot: net.slot, published }), { mode: 0o600 });
      if (published) await publish(network, net.address, published);
      // Passable by its user (0711); the secrets file and the directories it writes are opened to it too.
      await chmodOpened(request.workDir, 0o711, constants.O_DIRECTORY);
      await openToInstance(request.files);
    } catch (error) {
      await releaseAll(cgroup, net.slot, request.fileName, published);
      throw error;
    }
    const sources = [...visible, request.workDir, ...request.files.writable];
    const staged = sources.map((at, index) => ({ staged: `${STAGE}/${index}`, at }));
    const bwrap = bwrapArguments({
      readOnly: staged.slice(0, visible.length), workDir: staged[visible.length], writable: staged.slice(visible.length + 1),
      hidden: options.hidden, cwd: request.cwd, hostname: `svc-${request.fileName.slice(2, 14)}`,
    });
    return {
      argv: [tools.unshare, '--mount', '--propagation', 'private', '--', tools.sh, '-c', LAUNCHER, 'sh', STAGE, tools.mount, tools.mkdir,
        ...cgroup.procsFiles(), '--', ...sources, '--',
        tools.nsenter, `--net=/run/netns/${net.namespace}`, '-S', String(uid), '-G', String(uid), '--',
        tools.bwrap, ...bwrap, '--', ...request.command],
      env: { HOME: '/tmp', TMPDIR: '/tmp' },
      host: options.advertise ?? net.address,
      signal: (signal, spare) => cgroup.signal(signal, spare),
      outOfMemory: async () => (await cgroup.oomKills()) > 0,
      release: () => releaseAll(cgroup, net.slot, request.fileName, published),
    };
  }

  async function releaseAll(cgroup: InstanceCgroup, slot: number, fileName: string, published: Published | undefined): Promise<void> {
    await cgroup.remove();
    if (published) await unpublish(network, published);
    await removeNetwork(network, slot);
    await rm(recordOf(fileName), { force: true });
  }

  async function cleanup(): Promise<void> {
    const left = new Set(await leftoverCgroups(layout));
    let files: string[] = [];
    try {
      files = (await readdir(records)).filter((name) => name.endsWith('.json'));
    } catch {
      // nothing recorded
    }
    for (const file of files) {
      const fileName = file.slice(0, -'.json'.length);
      left.delete(fileName);
      try {
        const { slot, published } = recordSchema.parse(JSON.parse(await readFile(path.join(records, file), 'utf8')));
        await releaseAll(new InstanceCgroup(layout, fileName), slot, fileName, published);
      } catch (error) {
        options.log.warn({ err: error, file }, 'unreadable sandbox record skipped');
        await rm(path.join(records, file), { force: true });
      }
    }
    for (const name of left) await new InstanceCgroup(layout, name).remove();
    if (files.length + left.size) options.log.info({ sandboxes: files.length + left.size }, 'ended sandboxes left by an earlier run');
    const orphans = await removeOrphanNetworks(network);
    if (orphans) options.log.info({ networks: orphans }, 'ended sandbox networks of agents no longer running');
    makeSpare();
  }

  async function close(): Promise<void> {
    closed = true;
    const unused = await spare;
    spare = undefined;
    if (unused) await releaseAll(new InstanceCgroup(layout, spareName(unused.slot)), unused.slot, spareName(unused.slot), undefined);
    for (const base of layout.bases) await rmdir(base).catch(() => {}); // still holding an instance: kept
  }

  return { prepare, cleanup, close };
}

const SEARCH = ['/usr/bin', '/usr/sbin', '/bin', '/sbin'];

function findTools(): Tools | { missing: string } {
  const where = (name: string) => SEARCH.map((dir) => path.join(dir, name)).find((candidate) => existsSync(candidate));
  const names = ['sh', 'mount', 'mkdir', 'unshare', 'nsenter', 'bwrap', 'ip', 'nft'];
  const [sh, mount, mkdir, unshare, nsenter, bwrap, ip, nft] = names.map(where);
  if (!sh || !mount || !mkdir || !unshare || !nsenter || !bwrap || !ip || !nft) return { missing: names.find((name) => !where(name))! };
  return { sh, mount, mkdir, unshare, nsenter, bwrap, ip, nft };
}

function firstLine(error: unknown): string {
  const text = (error as { stderr?: string }).stderr?.trim() || (error as Error).message;
  return text.split('\n')[0];
}
