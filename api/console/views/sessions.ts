// Who streams a STREAMING version and who waits in its line (docs/api.md, "Streaming sessions"): the counts
// a start screen shows (the sign-in's GET) and the owner's list of sessions, refreshed while the view is open.
import { call, enc, get } from '../api.ts';
import { badge, errorBox, h, table, when } from '../dom.ts';

type Session = {
  sessionId: string; state: 'WAITING' | 'GRANTED' | 'STREAMING' | 'RESUMING';
  subject: { kind: 'token' | 'api-key'; credentialId: string; ownerId: string };
  joinedAt: string; position?: number; instanceId?: string; grantedAt?: string; connectedAt?: string; resumeBy?: string;
};
type Counts = { instances: number; free: number; waiting: number };

const REFRESH_MS = 2000;

export function sessionsPanel(functionId: string, versionId: string, onLeave: (stop: () => void) => void): HTMLElement {
  const counts = h('p', { id: 'stream-counts' }, 'Reading the sessions…');
  const list = h('div', { id: 'sessions' });
  const load = async () => {
    try {
      // The streaming sign-in's GET (docs/api.md, Streaming sessions): what a start screen shows.
      const described = await call<Counts>('GET', '/v2/svc/streaming', undefined, undefined,
        { 'x-svc-absorb': 'true', 'svc-function-id': functionId, 'svc-function-version-id': versionId });
      counts.replaceChildren(`${described.instances} instances, ${described.free} free, ${described.waiting} waiting in line.`);
    } catch (error) {
      counts.replaceChildren(errorBox(error));
    }
    try {
      const { sessions } = await get<{ sessions: Session[] }>(`/v2/svc/functions/${enc(functionId)}/versions/${enc(versionId)}/sessions`);
      list.replaceChildren(table('Who streams, and who waits in line', ['Who', 'State', 'Instance', 'Since', 'Asked at'], sessions.map((session) => [
        who(session.subject), h('span', {}, badge(session.state), ' ', stateDetail(session)),
        session.instanceId ? h('code', {}, session.instanceId.slice(0, 8)) : '—', when(session.connectedAt ?? session.grantedAt ?? session.joinedAt), when(session.joinedAt),
      ])));
    } catch (error) {
      list.replaceChildren(errorBox(error));
    }
  };
  void load();
  const timer = setInterval(() => void load(), REFRESH_MS);
  onLeave(() => clearInterval(timer));
  return h('div', { class: 'sessions' }, counts, list);
}

/** Whose credential: its kind, its id (never its value) and whom it was issued to. */
function who(subject: Session['subject']): HTMLElement {
  return h('span', {}, subject.kind === 'token' ? 'Token ' : 'API key ', h('code', {}, subject.credentialId), ` of ${subject.ownerId}`);
}

function stateDetail(session: Session): string {
  if (session.state === 'WAITING') return `#${session.position} in line`;
  if (session.state === 'RESUMING' && session.resumeBy) return `until ${new Date(session.resumeBy).toLocaleTimeString()}`;
  return '';
}
