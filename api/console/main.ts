// The console's entry: checks the tab's credential, then routes by the URL's hash (#/functions,
// #/functions/{id}/{version}, #/watch/{id}/{version}, #/tasks, #/tasks/{id}, #/admin). A view that fails shows why in a sentence.
import { get, refusesCredential } from './api.ts';
import { errorBox, h } from './dom.ts';
import { credential, session, type Whoami } from './session.ts';
import { adminView } from './views/admin.ts';
import { functionView } from './views/function.ts';
import { functionsView } from './views/functions.ts';
import { signInView } from './views/signin.ts';
import { taskView, tasksView } from './views/tasks.ts';
import { watchView } from './views/watch.ts';

const main = document.getElementById('main')!;
const nav = document.getElementById('nav')!;
const who = document.getElementById('who')!;
const signOut = document.getElementById('sign-out') as HTMLButtonElement;
let leaving: (() => void)[] = [];

function signedIn(whoami: Whoami | undefined) {
  session.set(whoami);
  nav.hidden = !whoami;
  signOut.hidden = !whoami;
  who.textContent = whoami ? `${whoami.ncaId} · ${whoami.kind}` : '';
  // An account-administration token names no account: it has only the operators' view.
  for (const link of nav.querySelectorAll<HTMLElement>('a:not(#nav-admin)')) link.hidden = whoami?.kind === 'admin';
  document.getElementById('nav-admin')!.hidden = !whoami || !(whoami.kind === 'admin' || whoami.scopes.includes('cluster-management') || whoami.scopes.includes('account_setup'));
}

async function viewFor(path: string[]): Promise<HTMLElement> {
  const onLeave = (stop: () => void) => leaving.push(stop);
  switch (path[0]) {
    case 'functions': return path[2] ? functionView(path[1], path[2], onLeave) : functionsView();
    case 'watch': return watchView(path[1], path[2], onLeave);
    case 'tasks': return path[1] ? taskView(path[1], onLeave) : tasksView();
    case 'admin': return adminView();
    default: return session.get()?.kind === 'admin' ? adminView() : functionsView();
  }
}

async function show(refused?: unknown) {
  for (const stop of leaving) stop();
  leaving = [];
  if (!session.get()) {
    main.replaceChildren(signInView((whoami) => {
      signedIn(whoami);
      void show();
    }, refused));
    return;
  }
  const path = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  main.setAttribute('aria-busy', 'true');
  const view = await viewFor(path).catch((error: unknown) => h('section', {}, h('h1', {}, 'Something went wrong'), errorBox(error)));
  main.replaceChildren(view);
  main.removeAttribute('aria-busy');
  for (const link of nav.querySelectorAll('a')) {
    if (link.getAttribute('href') === `#/${path[0] ?? ''}`) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

signOut.addEventListener('click', () => {
  credential.clear();
  signedIn(undefined);
  location.hash = '';
  void show();
});
window.addEventListener('hashchange', () => void show());
// The skip link moves focus without touching the hash, which is the console's route.
document.querySelector('.skip')!.addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

/**
 * A credential kept from before a reload is checked again; one the API refuses now (expired, revoked) is
 * dropped. With no answer (the platform restarting) the tab keeps it for the next reload, and says why.
 */
async function start() {
  let failed: unknown;
  if (credential.get()) {
    try {
      signedIn(await get<Whoami>('/v2/svc/whoami'));
    } catch (error) {
      if (refusesCredential(error)) credential.clear();
      failed = error;
    }
  }
  await show(failed);
}
void start();
