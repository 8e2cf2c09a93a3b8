// Whether this machine can run the process runtime's sandbox (root, bubblewrap, nftables, iproute2,
// util-linux). In CI it must (.ci/run installs the packages); elsewhere a test that needs it is skipped
// with one printed line saying what to install.
import { existsSync } from 'node:fs';

const TOOLS = ['/usr/bin/bwrap', '/usr/sbin/nft', '/usr/sbin/ip', '/usr/bin/nsenter', '/usr/bin/unshare'];

/** Why a test needing the sandbox is skipped, or false. Under CI it always runs. */
export function needsSandbox(what: string): string | false {
  if (process.env.CI) return false;
  const missing = TOOLS.filter((tool) => !existsSync(tool));
  const reason = missing.length ? `needs ${missing.join(', ')} (Debian packages bubblewrap nftables iproute2 util-linux)`
    : process.getuid?.() !== 0 ? 'needs root (network namespaces, cgroups)' : undefined;
  if (reason) console.log(`# skipping ${what}: ${reason}`);
  return reason ?? false;
}
