// The host firewall the account networks need: the engines' bridges route between each other and to every
// host listener (netavark 1.4 ignores its `isolate` option; Docker does not filter traffic to the host), so
// each agent keeps an nftables table of its own, `inet svc_docker_<tag>`, over its account bridges (named
// svcd<tag>…, docker-network.ts). From a container it lets through only replies, its own network's DNS
// (the engine's resolver on its gateway), and the host ports of `dockerHostPorts`; forwarding to private,
// shared and link-local addresses (other containers, other accounts, the LAN, cloud metadata) and to any
// account bridge is refused. The table is written whole, in one transaction: applying it again changes
// nothing, and agents sharing a host keep their own host ports.
import { spawn } from 'node:child_process';
import { UnstartableError } from '../runtime.ts';

/** Prefix of every account bridge's interface name: svcd<agent tag, 4><account, 7> (15 characters at most). */
export const BRIDGE_PREFIX = 'svcd';

export const firewallTable = (agentTag: string) => `svc_docker_${agentTag}`;

const PRIVATE_V4 = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16'];
const PRIVATE_V6 = ['fc00::/7', 'fe80::/10'];

export function firewallRules(agentTag: string, hostPorts: number[]): string {
  const bridges = `iifname "${BRIDGE_PREFIX}${agentTag}*"`;
  const ports = hostPorts.length ? `\n    ${bridges} meta l4proto { tcp, udp } th dport { ${hostPorts.join(', ')} } accept` : '';
  const table = firewallTable(agentTag);
  return `table inet ${table} {}
delete table inet ${table}
table inet ${table} {
  chain input {
    type filter hook input priority filter - 5; policy accept;
    ${bridges} ct state established,related accept
    ${bridges} meta l4proto { tcp, udp } th dport 53 fib daddr . iif type local accept${ports}
    ${bridges} reject
  }
  chain forward {
    type filter hook forward priority filter - 5; policy accept;
    ${bridges} ct state established,related accept
    ${bridges} ip daddr { ${PRIVATE_V4.join(', ')} } reject
    ${bridges} ip6 daddr { ${PRIVATE_V6.join(', ')} } reject
    ${bridges} oifname "${BRIDGE_PREFIX}*" reject
  }
}
`;
}

const NFT_TIMEOUT_MS = 10_000;

/** Applies the table with `nft -f -`; without nft or the right to use it, no container can start isolated. */
export async function applyFirewall(agentTag: string, hostPorts: number[]): Promise<void> {
  const failure = await nft(firewallRules(agentTag, hostPorts));
  if (failure) {
    throw new UnstartableError(`account networks need the agent's nftables table ${firewallTable(agentTag)} (nft, Debian package nftables, `
      + `run with CAP_NET_ADMIN in the host's network namespace), or dockerNetwork: engine: ${failure}`);
  }
}

/** Takes the agent's table away (its bridges are gone); one never made is no error. */
export async function removeFirewall(agentTag: string): Promise<void> {
  const table = firewallTable(agentTag);
  await nft(`table inet ${table} {}\ndelete table inet ${table}\n`);
}

/** Runs an nftables script; what went wrong, or undefined. */
function nft(script: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const child = spawn('nft', ['-f', '-'], { stdio: ['pipe', 'ignore', 'pipe'], timeout: NFT_TIMEOUT_MS });
    let output = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { output = (output + chunk).slice(-2000); });
    child.on('error', (error) => resolve(error.message));
    child.on('close', (code) => resolve(code === 0 ? undefined : output.trim() || `nft exited ${code}`));
    child.stdin.on('error', () => {}); // a missing nft closes its stdin; the error above says why
    child.stdin.end(script);
  });
}
