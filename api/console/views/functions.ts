// The account's functions: one row per version with its status and, when it is not ACTIVE, why.
import { get } from '../api.ts';
import { badge, errorBox, h, table } from '../dom.ts';
import { scopesView } from './signin.ts';
import { session } from '../session.ts';

export type Instance = {
  instanceId: string; instanceType: string; instanceStatus: string; gpu: string; backend: string; location?: string;
  instanceCreatedAt: string; instanceUpdatedAt: string; restartCount?: number;
};
export type FunctionVersion = {
  id: string; versionId: string; name: string; status: string; functionType: string; createdAt: string; description?: string;
  containerImage?: string; inferenceUrl: string; activeInstances: Instance[];
  healthInfo?: { gpu: string; backend: string; instanceType: string; error: string }[];
};

/** Why a version is not ACTIVE, in words. */
export function reasonOf(fn: FunctionVersion): string {
  const said = (fn.healthInfo ?? []).map((info) => info.error).join('; ');
  if (said) return said;
  switch (fn.status) {
    case 'ACTIVE': return '';
    case 'INACTIVE': return 'Not deployed.';
    case 'DEPLOYING': return fn.activeInstances.length ? 'Instances are starting; waiting for their health checks.' : 'Waiting for an instance to be placed.';
    case 'ERROR': return 'Its instances failed; see the deployment.';
    case 'DEGRADED': return 'Some of its instances are not running.';
    case 'DEGRADING': return 'Being undeployed.';
    default: return '';
  }
}

export async function functionsView(): Promise<HTMLElement> {
  const view = h('section', { 'aria-labelledby': 'functions-title' }, h('h1', { id: 'functions-title' }, 'Functions'));
  const whoami = session.get();
  try {
    const { functions } = await get<{ functions: FunctionVersion[] }>('/v2/svc/functions');
    view.append(table(`${functions.length} function versions of account ${whoami?.ncaId ?? ''}`,
      ['Name', 'Version', 'Type', 'Status', 'Instances', 'Reason'],
      functions.map((fn) => [
        h('a', { href: `#/functions/${fn.id}/${fn.versionId}` }, fn.name),
        h('code', {}, fn.versionId.slice(0, 8)),
        fn.functionType,
        badge(fn.status),
        String(fn.activeInstances.filter((instance) => instance.instanceStatus === 'RUNNING').length),
        reasonOf(fn),
      ])));
  } catch (error) {
    view.append(errorBox(error));
  }
  if (whoami) view.append(scopesView(whoami));
  return view;
}
