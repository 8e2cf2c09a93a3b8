// Operators: accounts and their quotas (an account-administration credential), clusters and their agents'
// state (a token with cluster-management).
import { enc, get } from '../api.ts';
import { badge, errorBox, h, table, when } from '../dom.ts';
import { session } from '../session.ts';

type Account = { ncaId: string; name?: string; createdAt?: string } & Record<string, unknown>;
type Cluster = { clusterId: string; clusterName: string; clusterGroupName?: string; status: string; region?: string; lastConnectedAt?: string; gpus?: { name: string; capacity?: number }[] };

const LIMITS = ['maxFunctionsAllowed', 'maxTasksAllowed', 'maxInstancesAllowed', 'maxTelemetriesAllowed', 'maxRegistryCredentialsAllowed', 'maxAssetsAllowed'];

export async function adminView(): Promise<HTMLElement> {
  const view = h('section', { 'aria-labelledby': 'admin-title' }, h('h1', { id: 'admin-title' }, 'Operators'));
  view.append(h('h2', {}, 'Accounts'));
  try {
    const { accounts } = await get<{ accounts: Account[] }>('/v2/svc/accounts');
    view.append(table('Accounts and their limits', ['Account', ...LIMITS.map((limit) => limit.replace(/^max|Allowed$/g, '')), 'Created'],
      accounts.map((account) => [account.ncaId, ...LIMITS.map((limit) => String(limitOf(account, limit) ?? '—')), when(account.createdAt)])));
  } catch (error) {
    view.append(errorBox(error));
  }
  view.append(h('h2', {}, 'Clusters'));
  const ncaId = session.get()?.ncaId;
  try {
    const clusters = await get<Cluster[]>(`/v1/accounts/${enc(ncaId ?? '')}/clusters`);
    view.append(table('Clusters and their agents', ['Cluster', 'Group', 'Agent', 'Region', 'GPUs'], clusters.map((cluster) => [
      cluster.clusterName, cluster.clusterGroupName ?? '', badge(cluster.status), cluster.region ?? '',
      (cluster.gpus ?? []).map((gpu) => `${gpu.name}×${gpu.capacity ?? '?'}`).join(', '),
    ])));
  } catch (error) {
    view.append(errorBox(error));
  }
  return view;
}

/** A limit wherever the account carries it (top level or under `limits`). */
function limitOf(account: Account, name: string): unknown {
  const limits = account.limits as Record<string, unknown> | undefined;
  return account[name] ?? limits?.[name];
}
