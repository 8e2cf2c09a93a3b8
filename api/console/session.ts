// The credential lives in this tab's sessionStorage only: never a URL, never a cookie. Closing the tab or
// signing out forgets it.
const KEY = 'svc-console-credential';

export type Whoami = { credentialId: string; kind: string; ncaId: string; ownerId: string; scopes: string[] };

export const credential = {
  get: (): string | null => sessionStorage.getItem(KEY),
  set: (value: string) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

let current: Whoami | undefined;
export const session = {
  get: () => current,
  set: (whoami: Whoami | undefined) => { current = whoami; },
  can: (...scopes: string[]) => !!current && (current.kind === 'admin' || scopes.some((scope) => current!.scopes.includes(scope))),
};
