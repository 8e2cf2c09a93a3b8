// Operators: accounts and their quotas (an account-administration credential), clusters and their agents'
// state (a token with cluster-management).
import { enc, get } from '../api.ts';
import { badge, errorBox, h, table } from '../dom.ts';
import { session } from '../session.ts';

type Account = { ncaId: string; name: string } & Record<string, unknown>;
type Cluster = { clusterId: string; clusterName: string; clusterGroupName?: string; status: string; region?: string; lastConnectedAt?: string; gpus?: { name: string; capacity?: number }[] };

const LIMITS: [string, string][] = [
  ['maxFunctionsAllowed', 'Functions'], ['maxTasksAllowed', 'Tasks'], ['maxInstancesAllowed', 'Instances'], ['maxTelemetriesAllowed', 'Telemetries'],
  ['maxRegistryCredentialsAllowed', 'Registry credentials'], ['maxAssetsAllowed', 'Assets'], ['maxAssetBytesAllowed', 'Asset bytes'],
];

export async function adminView(): Promise<HTMLElement> {
  const view = h('section', { 'aria-labelledby': 'admin-title' }, h('h1', { id: 'admin-title' }, 'Operators'));
  view.append(h('h2', {}, 'Accounts'));
  try {
    const { accounts } = await get<{ accounts: Account[] }>('/v2/svc/accounts');
    view.append(table('Accounts and their limits (change them with svc account set-limits)', ['Account', 'Name', ...LIMITS.map(([, label]) => label)],
      accounts.map((account) => [account.ncaId, account.name, ...LIMITS.map(([limit]) => String(account[limit] ?? '—'))])));
  } catch (error) {
    view.append(errorBox(error));
  }
  view.append(h('h2', {}, 'Clusters'));
  const whoami = session.get();
  // Clusters belong to accounts: an account-administration token names none, so it cannot list them.
  if (whoami?.kind === 'admin') {
    view.append(h('p', { class: 'hint' }, 'Clusters are listed with a management token carrying cluster-management (svc init), not an account-administration token.'));
    return view;
  }
  const ncaId = whoami?.ncaId;
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
