// A sandboxed instance's own network: a network namespace joined to the host by a veth pair on a /30 of
// the sandbox subnet. The instance listens on its side's address, which the host routes to directly, so
// the invocation plane reaches it with no proxy or address translation in between. From inside, loopback
// is the instance's own; the host's loopback services (PostgreSQL, NATS, Redis, the agent) are not there,
// and a firewall table of the platform's own (nftables, `inet svc_sandbox`) drops whatever a sandbox
// opens towards the host except the gateway's public port (the "doors") and anything it would send on to
// another sandbox or out of the host.
//
// An agent that advertises another address than loopback (a remote host) publishes each instance's ports
// on the host instead: the table's maps translate a connection to any of the host's own addresses on
// that port to the instance's address (nft DNAT), and forwarded traffic reaches a sandbox only so.
//
// Slot n of the subnet gives the namespace `svcs-<n>`, the host's interface `svcs<n>`, the host address
// <subnet> + 4n + 1 and the instance's + 4n + 2. `ip netns add` is the claim: it fails when the name
// exists, so agents sharing a host (several platforms on one machine) never hand out one slot twice.
//
// A mark per slot (/run/svc-sandbox/slots/<n>) names the agent process that made it, by pid and start
// time. The agent's state dir records its slots for its own restart; the mark lets any agent starting on
// the host end the namespaces of one that died and whose state dir went with it (kill -9, a temporary dir).
import { execFile } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

const TABLE = 'svc_sandbox';
const PREFIX = 'svcs';
const MARKS = '/run/svc-sandbox/slots';
/** A namespace without a mark this old was left by a run from before the marks (or one cut off mid-claim). */
const UNMARKED_GRACE_MS = 10 * 60_000;

export interface SandboxNetwork {
  slot: number;
  namespace: string;
  /** The address the instance listens on, and the host reaches it at. */
  address: string;
}

export interface NetworkOptions {
  ip: string;
  nft: string;
  /** The sandbox subnet's first address (a /16: 16,384 slots of a /30). */
  subnet: string;
}

const namespaceOf = (slot: number) => `${PREFIX}-${slot}`;

/** The platform's firewall table, made or refreshed in one transaction (agents may run this at once), and the doors added. */
export async function installFirewall(options: NetworkOptions, doors: number[]): Promise<void> {
  const ours = `iifname "${PREFIX}*"`;
  const lines = [
    `add table inet ${TABLE}`,
    `add set inet ${TABLE} doors { type inet_service; }`,
    ...['tcp', 'udp'].map((protocol) => `add map inet ${TABLE} ${protocol}_published { type inet_service : ipv4_addr; }`),
    `add chain inet ${TABLE} input { type filter hook input priority filter - 10; policy accept; }`,
    `add chain inet ${TABLE} forward { type filter hook forward priority filter - 10; policy accept; }`,
    `add chain inet ${TABLE} prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
    `add chain inet ${TABLE} output { type nat hook output priority -100; policy accept; }`,
    ...['input', 'forward', 'prerouting', 'output'].map((chain) => `flush chain inet ${TABLE} ${chain}`),
    // Answers to connections the host opened (the gateway's requests, a browser's media) come back.
    `add rule inet ${TABLE} input ${ours} ct state established,related accept`,
    `add rule inet ${TABLE} input ${ours} tcp dport @doors accept`,
    `add rule inet ${TABLE} input ${ours} drop`,
    `add rule inet ${TABLE} forward ${ours} ct state established,related accept`,
    `add rule inet ${TABLE} forward ${ours} drop`,
    `add rule inet ${TABLE} forward oifname "${PREFIX}*" ct status dnat accept`,
    `add rule inet ${TABLE} forward oifname "${PREFIX}*" drop`,
    // Published ports: to any of the host's own addresses, from elsewhere or from the host itself.
    ...['tcp', 'udp'].flatMap((protocol) => [
      `add rule inet ${TABLE} prerouting fib daddr type local dnat ip to ${protocol} dport map @${protocol}_published`,
      `add rule inet ${TABLE} output ip daddr != 127.0.0.0/8 fib daddr type local dnat ip to ${protocol} dport map @${protocol}_published`,
    ]),
    ...(doors.length ? [`add element inet ${TABLE} doors { ${doors.join(', ')} }`] : []),
  ];
  await pipe(options.nft, ['-f', '-'], lines);
}

export interface Published {
  tcp: number[];
  udp: number[];
}

/** Publishes `ports` of the host on an instance's address (a port another instance holds fails). */
export async function publish(options: NetworkOptions, address: string, ports: Published): Promise<void> {
  const lines = (['tcp', 'udp'] as const).filter((protocol) => ports[protocol].length).map((protocol) =>
    `add element inet ${TABLE} ${protocol}_published { ${ports[protocol].map((port) => `${port} : ${address}`).join(', ')} }`);
  if (lines.length) await pipe(options.nft, ['-f', '-'], lines);
}

/** Takes published ports back; one by one when some are gone already (after a crash), so the rest still go. */
export async function unpublish(options: NetworkOptions, ports: Published): Promise<void> {
  const lines = (['tcp', 'udp'] as const).flatMap((protocol) =>
    ports[protocol].map((port) => `delete element inet ${TABLE} ${protocol}_published { ${port} }`));
  if (!lines.length) return;
  await pipe(options.nft, ['-f', '-'], lines).catch(async () => {
    for (const line of lines) await pipe(options.nft, ['-f', '-'], [line]).catch(() => {});
  });
}

/** Forwarding on, which published ports need (a namespace's own setting; the host's, on a host). */
export async function enableForwarding(): Promise<void> {
  await writeFile('/proc/sys/net/ipv4/ip_forward', '1');
}

/** Claims a free slot and wires its namespace: the veth pair, both addresses, the instance's default route. */
export async function createNetwork(options: NetworkOptions): Promise<SandboxNetwork> {
  const start = randomInt(0, SLOTS);
  for (let attempt = 0; attempt < 64; attempt++) {
    const slot = (start + attempt) % SLOTS;
    const namespace = namespaceOf(slot);
    try {
      await run(options.ip, ['netns', 'add', namespace]);
    } catch {
      continue; // taken by another instance or agent
    }
    await mark(slot);
    const [host, inside] = [addressOf(options.subnet, slot, 1), addressOf(options.subnet, slot, 2)];
    try {
      await pipe(options.ip, ['-batch', '-'], [
        `link add ${PREFIX}${slot} type veth peer name eth0 netns ${namespace}`,
        `addr add ${host}/30 dev ${PREFIX}${slot}`,
        `link set ${PREFIX}${slot} up`,
      ]);
      await pipe(options.ip, ['-n', namespace, '-batch', '-'], [
        `addr add ${inside}/30 dev eth0`, 'link set eth0 up', 'link set lo up', `route add default via ${host}`,
      ]);
      return { slot, namespace, address: inside };
    } catch {
      // A leftover interface of this slot still lives (its namespace held by processes of a crashed run).
      await removeNetwork(options, slot);
    }
  }
  throw new Error('no free sandbox network slot (64 tried)');
}

/** Deletes a slot's namespace; its veth pair goes with it once no process holds the namespace. */
export async function removeNetwork(options: NetworkOptions, slot: number): Promise<void> {
  // The mark goes first: once the namespace is gone another agent may claim the slot and mark it.
  await rm(markOf(slot), { force: true });
  await run(options.ip, ['netns', 'del', namespaceOf(slot)]).catch(() => {});
}

/** Ends the namespaces of agents no longer running (by their marks); the number ended. */
export async function removeOrphanNetworks(options: NetworkOptions): Promise<number> {
  const slots = (await readdir('/run/netns').catch(() => [] as string[]))
    .map((name) => /^svcs-(\d+)$/.exec(name)?.[1]).filter((slot) => slot !== undefined).map(Number);
  await mkdir(MARKS, { recursive: true, mode: 0o700 });
  let ended = 0;
  for (const slot of slots) if (await claimOrphan(slot)) {
    await run(options.ip, ['netns', 'del', namespaceOf(slot)]).catch(() => {});
    await rm(`${markOf(slot)}.${process.pid}`, { force: true });
    ended++;
  }
  return ended;
}

const markOf = (slot: number) => path.join(MARKS, String(slot));

async function mark(slot: number): Promise<void> {
  await mkdir(MARKS, { recursive: true, mode: 0o700 });
  await writeFile(markOf(slot), await processIdentity(process.pid) ?? '', { mode: 0o600 });
}

/**
 * Whether `slot` belongs to no live agent, taken over if so. The mark is moved aside first (only one agent
 * wins the rename), so two agents starting at once never both delete, nor delete a slot claimed anew.
 */
async function claimOrphan(slot: number): Promise<boolean> {
  const owner = await readFile(markOf(slot), 'utf8').catch(() => undefined);
  if (owner === undefined) {
    const made = await stat(`/run/netns/${namespaceOf(slot)}`).catch(() => undefined);
    if (!made || Date.now() - made.mtimeMs < UNMARKED_GRACE_MS) return false;
    await writeFile(markOf(slot), '', { flag: 'wx', mode: 0o600 }).catch(() => {});
  } else if (await processIdentity(Number(owner.split(' ')[0])) === owner) {
    return false;
  }
  const aside = `${markOf(slot)}.${process.pid}`;
  if (!await rename(markOf(slot), aside).then(() => true, () => false)) return false;
  const moved = await readFile(aside, 'utf8').catch(() => '');
  if (moved === (owner ?? '')) return true;
  await rename(aside, markOf(slot)); // claimed anew meanwhile: it is that agent's
  return false;
}

/** "<pid> <start time>": a pid the kernel reused reads as another process. */
async function processIdentity(pid: number): Promise<string | undefined> {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const proc = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // Fields after the command's closing parenthesis; the start time is the 22nd field of the whole line.
  const startTime = proc?.slice(proc.lastIndexOf(')') + 2).split(' ')[19];
  return startTime ? `${pid} ${startTime}` : undefined;
}

const SLOTS = 16_384;

/** <subnet> + 4·slot + offset, as a dotted quad. */
function addressOf(subnet: string, slot: number, offset: number): string {
  const [a, b] = subnet.split('.').map(Number);
  const value = slot * 4 + offset;
  return `${a}.${b}.${value >> 8}.${value & 255}`;
}

/** Runs a command with `lines` on its standard input (nft -f -, ip -batch -); rejects with its stderr. */
function pipe(command: string, args: string[], lines: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile(command, args, (error, _stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')}: ${stderr.trim() || error.message}`));
      else resolve();
    });
    child.stdin!.end(`${lines.join('\n')}\n`);
  });
}
