// Sign-in: a key or token is checked with GET /v2/svc/whoami before it is kept in the tab.
import { call } from '../api.ts';
import { errorBox, h } from '../dom.ts';
import { credential, type Whoami } from '../session.ts';

export function signInView(signedIn: (whoami: Whoami) => void, refused?: unknown): HTMLElement {
  const input = h('input', {
    id: 'credential', name: 'credential', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true,
    'aria-describedby': 'credential-help',
  });
  const message = h('div', { id: 'sign-in-message', 'aria-live': 'polite' }, refused ? errorBox(refused) : '');
  const form = h('form', { class: 'card sign-in', 'aria-labelledby': 'sign-in-title' },
    h('h1', { id: 'sign-in-title' }, 'Sign in'),
    h('label', { for: 'credential' }, 'API key or management token'),
    input,
    h('p', { id: 'credential-help', class: 'hint' },
      'Kept in this tab only (session storage) and sent as a bearer to this platform. Closing the tab or signing out forgets it.'),
    h('button', { type: 'submit' }, 'Sign in'),
    message);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const value = input.value.trim();
    message.replaceChildren();
    call<Whoami>('GET', '/v2/svc/whoami', undefined, value).then((whoami) => {
      credential.set(value);
      signedIn(whoami);
    }, (error: unknown) => message.replaceChildren(errorBox(error)));
  });
  queueMicrotask(() => input.focus());
  return form;
}

export function scopesView(whoami: Whoami): HTMLElement {
  return h('section', { class: 'card', 'aria-labelledby': 'whoami-title' },
    h('h2', { id: 'whoami-title' }, 'Signed in'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Credential'), h('dd', {}, `${whoami.kind} ${whoami.credentialId}`),
      h('dt', {}, 'Account'), h('dd', {}, whoami.ncaId),
      h('dt', {}, 'Owner'), h('dd', {}, whoami.ownerId),
      h('dt', {}, 'May'), h('dd', { id: 'scopes' }, whoami.scopes.length
        ? h('ul', { class: 'scopes' }, whoami.scopes.map((scope) => h('li', {}, scope)))
        : whoami.kind === 'admin' ? 'administer accounts (installation administrator)' : 'nothing')));
}
