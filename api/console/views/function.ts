// One function version: status and reason, deployment (scale from the page), instances, versions,
// numbers as plots, the live log, and for a STREAMING function who streams and who waits.
import { call, enc, get } from '../api.ts';
import { badge, errorBox, h, table, when } from '../dom.ts';
import { logPanel } from './log-panel.ts';
import { sessionsPanel } from './sessions.ts';
import { statsPlots, type Stats } from '../plot.ts';
import { reasonOf, type FunctionVersion } from './functions.ts';

type GpuSpecification = { gpuSpecificationId: string; gpu: string; instanceType: string; minInstances: number; maxInstances: number; maxRequestConcurrency: number };
type Deployment = { deploymentId: string; deploymentSpecifications: GpuSpecification[]; healthInfo?: { error: string }[] };

const REFRESH_MS = 2000;

export async function functionView(functionId: string, versionId: string, onLeave: (stop: () => void) => void): Promise<HTMLElement> {
  const versionPath = `/v2/svc/functions/${enc(functionId)}/versions/${enc(versionId)}`;
  const fn = (await get<{ function: FunctionVersion }>(versionPath)).function;
  const status = h('div', { id: 'status' });
  const instances = h('div', { id: 'instances' });
  const log = logPanel({ functionId, versionId }, onLeave);
  const render = (current: FunctionVersion) => {
    const reason = reasonOf(current);
    status.replaceChildren(h('p', {}, 'Status ', badge(current.status), reason ? h('span', { class: 'reason' }, ` ${reason}`) : ''));
    instances.replaceChildren(table('Instances', ['Instance', 'Status', 'GPU', 'Where', 'Restarts', 'Started', 'Updated'],
      current.activeInstances.map((instance) => [
        h('code', {}, instance.instanceId), badge(instance.instanceStatus), `${instance.gpu} ${instance.instanceType}`,
        [instance.backend, instance.location].filter(Boolean).join(' / '), instance.restartCount ?? '—',
        when(instance.instanceCreatedAt), when(instance.instanceUpdatedAt),
      ])));
    log.showInstances(current.activeInstances.map((instance) => instance.instanceId));
  };
  render(fn);
  const timer = setInterval(() => {
    get<{ function: FunctionVersion }>(versionPath).then(({ function: current }) => render(current), () => undefined);
  }, REFRESH_MS);
  onLeave(() => clearInterval(timer));

  const view = h('section', { 'aria-labelledby': 'function-title' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/functions' }, 'Functions'), ' / ', fn.name),
    h('h1', { id: 'function-title' }, fn.name),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Function'), h('dd', {}, h('code', {}, fn.id)),
      h('dt', {}, 'Version'), h('dd', {}, h('code', {}, fn.versionId)),
      h('dt', {}, 'Type'), h('dd', {}, fn.functionType),
      h('dt', {}, 'Image'), h('dd', {}, fn.containerImage ?? '—'),
      h('dt', {}, 'Created'), h('dd', {}, when(fn.createdAt))),
    status,
    h('h2', {}, 'Deployment'), await deploymentPanel(functionId, versionId),
    h('h2', {}, 'Instances'), instances,
    h('h2', {}, 'Numbers'), await statsPanel(versionPath),
    h('h2', {}, 'Log'), log.element,
    fn.functionType === 'STREAMING' ? streamingPanel(fn, onLeave) : '',
    h('h2', {}, 'Versions'), await versionsPanel(functionId));
  return view;
}

async function deploymentPanel(functionId: string, versionId: string): Promise<HTMLElement> {
  const path = `/v2/svc/deployments/functions/${enc(functionId)}/versions/${enc(versionId)}`;
  let deployment: Deployment;
  try {
    deployment = (await get<{ deployment: Deployment }>(path)).deployment;
  } catch (error) {
    return errorBox(error);
  }
  const box = h('div', { class: 'deployment' });
  for (const spec of deployment.deploymentSpecifications) box.append(scaleForm(path, spec));
  for (const info of deployment.healthInfo ?? []) box.append(h('p', { class: 'reason' }, info.error));
  return box;
}

function scaleForm(path: string, spec: GpuSpecification): HTMLElement {
  const field = (name: string, label: string, value: number, min: number) => {
    const id = `${name}-${spec.gpuSpecificationId}`;
    return h('label', { for: id }, label, h('input', { id, name, type: 'number', min, step: 1, value, inputmode: 'numeric', required: true }));
  };
  const message = h('div', { class: 'form-message', 'aria-live': 'polite' });
  const form = h('form', { class: 'scale', 'aria-label': `Scale ${spec.gpu} ${spec.instanceType}` },
    h('p', { class: 'spec' }, `${spec.gpu} · ${spec.instanceType}`),
    field('minInstances', 'Min instances', spec.minInstances, 0),
    field('maxInstances', 'Max instances', spec.maxInstances, 1),
    field('maxRequestConcurrency', 'Concurrency', spec.maxRequestConcurrency, 1),
    h('button', { type: 'submit' }, 'Scale'),
    message);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const number = (name: string) => Number(data.get(name));
    message.replaceChildren('Saving…');
    call('PUT', path, {
      deploymentSpecifications: [{
        gpuSpecificationId: spec.gpuSpecificationId, minInstances: number('minInstances'), maxInstances: number('maxInstances'),
        maxRequestConcurrency: number('maxRequestConcurrency'),
      }],
    }).then(() => message.replaceChildren(h('p', { class: 'ok' }, 'Saved; instances follow within seconds.')),
      (error: unknown) => message.replaceChildren(errorBox(error)));
  });
  return form;
}

async function statsPanel(versionPath: string): Promise<HTMLElement> {
  const box = h('div', { class: 'numbers' });
  const since = h('select', { id: 'since', 'aria-label': 'Period' },
    [['PT1H', 'PT1M', 'last hour'], ['PT6H', 'PT5M', 'last 6 hours'], ['PT24H', 'PT15M', 'last day']]
      .map(([period, step, label]) => h('option', { value: `${period},${step}` }, label)));
  const body = h('div', {});
  const load = async () => {
    const [period, step] = since.value.split(',');
    try {
      const { stats } = await get<{ stats: Stats }>(`${versionPath}/stats?since=${period}&step=${step}`);
      const t = stats.totals;
      body.replaceChildren(
        h('p', { class: 'totals' }, `${t.requests} requests, ${t.clientErrors} client errors (${t.rateLimited} rate-limited), ${t.serverErrors} server errors`,
          t.latencyMs ? `, p50 ${Math.round(t.latencyMs.p50)} ms, p99 ${Math.round(t.latencyMs.p99)} ms` : ''),
        statsPlots(stats));
    } catch (error) {
      body.replaceChildren(errorBox(error));
    }
  };
  since.addEventListener('change', () => void load());
  box.append(h('p', {}, h('label', { for: 'since' }, 'Period '), since, ' ',
    h('button', { type: 'button', onclick: () => void load() }, 'Refresh')), body);
  await load();
  return box;
}

function streamingPanel(fn: FunctionVersion, onLeave: (stop: () => void) => void): HTMLElement {
  return h('div', { class: 'streaming' }, h('h2', {}, 'Streaming'),
    h('p', {}, h('a', { href: `#/watch/${fn.id}/${fn.versionId}` }, 'Watch the stream'), ' beside its log and numbers.'),
    sessionsPanel(fn.id, fn.versionId, onLeave));
}

async function versionsPanel(functionId: string): Promise<HTMLElement> {
  try {
    const { functions } = await get<{ functions: FunctionVersion[] }>(`/v2/svc/functions/${enc(functionId)}/versions`);
    return table('Versions of this function', ['Version', 'Status', 'Created'], functions.map((version) => [
      h('a', { href: `#/functions/${version.id}/${version.versionId}` }, version.versionId), badge(version.status), when(version.createdAt),
    ]));
  } catch (error) {
    return errorBox(error);
  }
}
