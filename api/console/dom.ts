// A few DOM helpers: elements are built with textContent only, so nothing the API returns is parsed as HTML.
type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: (Child | Child[])[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.replace(/^on/, ''), value);
    else if (value === true) element.setAttribute(name, '');
    else element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(typeof child === 'object' ? child : String(child));
  }
  return element;
}

/** A table with a caption (for screen readers), one header row and rows of cells. */
export function table(caption: string, headers: string[], rows: Child[][]): HTMLElement {
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((name) => h('th', { scope: 'col' }, name)))),
    h('tbody', {}, rows.length ? rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell))))
      : h('tr', {}, h('td', { colspan: headers.length, class: 'empty' }, 'None.')))));
}

export const badge = (status: string) => h('span', { class: `badge badge-${status.toLowerCase()}` }, status);

/** Shows an error as a sentence where a view would be, never a blank page. */
export function errorBox(error: unknown): HTMLElement {
  return h('p', { class: 'error', role: 'alert' }, error instanceof Error ? error.message : String(error));
}

export function when(iso: string | undefined): string {
  if (!iso) return '';
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}
