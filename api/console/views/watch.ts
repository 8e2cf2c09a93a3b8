// Watch a STREAMING function in the page with the existing browser client (streaming-app/client), signed
// in with the tab's credential, beside the function's log and numbers.
import { enc, get } from '../api.ts';
import { badge, errorBox, h } from '../dom.ts';
import { credential } from '../session.ts';
import { StreamClient } from '../stream/stream-client.ts';
import { statsPlots, type Stats } from '../plot.ts';
import { logPanel } from './log-panel.ts';
import { sessionsPanel } from './sessions.ts';
import type { FunctionVersion } from './functions.ts';

export async function watchView(functionId: string, versionId: string, onLeave: (stop: () => void) => void): Promise<HTMLElement> {
  const versionPath = `/v2/svc/functions/${enc(functionId)}/versions/${enc(versionId)}`;
  const fn = (await get<{ function: FunctionVersion }>(versionPath)).function;
  const video = h('video', { id: 'watch-video', autoplay: true, playsinline: true, muted: true, 'aria-label': `${fn.name}, streamed` });
  video.muted = true;
  const status = h('p', { id: 'watch-status', 'aria-live': 'polite' }, 'Not started.');
  const start = h('button', { type: 'button' }, 'Start');
  const stop = h('button', { type: 'button', disabled: true }, 'Stop');
  let client: StreamClient | undefined;
  const end = () => {
    client?.bye('left the console view');
    client = undefined;
    start.disabled = false;
    stop.disabled = true;
  };
  start.addEventListener('click', () => {
    const key = credential.get() ?? '';
    const url = new URL('/v2/svc/streaming', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    client = new StreamClient({
      signalUrl: url.toString(), relayOnly: false,
      platform: {
        headers: { authorization: `Bearer ${key}`, 'svc-function-id': functionId, 'svc-function-version-id': versionId },
        protocols: [`authorization.${key}`, `function-id.${functionId}`, `function-version-id.${versionId}`],
      },
      onVideo: (stream) => { video.srcObject = stream; },
      onStatus: (text) => status.replaceChildren(text),
      onWaiting: (place) => status.replaceChildren(`Waiting for an instance: #${place.position} in line.`),
      onEnded: (reason) => {
        status.replaceChildren(`Ended: ${reason}.`);
        start.disabled = false;
        stop.disabled = true;
      },
    });
    start.disabled = true;
    stop.disabled = false;
    client.connect();
  });
  stop.addEventListener('click', end);
  onLeave(end);

  const log = logPanel({ functionId, versionId }, onLeave);
  log.showInstances(fn.activeInstances.map((instance) => instance.instanceId));
  const numbers = h('div', {});
  get<{ stats: Stats }>(`${versionPath}/stats?since=PT1H&step=PT1M`).then(({ stats }) => numbers.replaceChildren(statsPlots(stats)),
    (error: unknown) => numbers.replaceChildren(errorBox(error)));

  return h('section', { 'aria-labelledby': 'watch-title' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/functions' }, 'Functions'), ' / ',
      h('a', { href: `#/functions/${functionId}/${versionId}` }, fn.name), ' / watch'),
    h('h1', { id: 'watch-title' }, `Watch ${fn.name} `, badge(fn.status)),
    h('div', { class: 'watch' },
      h('div', { class: 'watch-stream' }, video, h('p', { class: 'controls' }, start, ' ', stop), status,
        h('h2', {}, 'Sessions'), sessionsPanel(functionId, versionId, onLeave)),
      h('div', { class: 'watch-side' }, h('h2', {}, 'Log'), log.element, h('h2', {}, 'Numbers'), numbers)));
}
