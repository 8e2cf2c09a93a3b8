// Tasks: the list with progress, and one task's events and results (downloaded with the tab's credential).
import { enc, get } from '../api.ts';
import { badge, errorBox, h, table, when } from '../dom.ts';
import { credential } from '../session.ts';
import { logPanel } from './log-panel.ts';

type Task = { id: string; name: string; status: string; percentComplete?: number; createdAt?: string; lastUpdatedAt?: string; containerImage?: string };
type TaskEvent = { message?: string; createdAt?: string };
type TaskResult = { resultId: string; name: string; size?: number; createdAt?: string };

export async function tasksView(): Promise<HTMLElement> {
  const view = h('section', { 'aria-labelledby': 'tasks-title' }, h('h1', { id: 'tasks-title' }, 'Tasks'));
  try {
    const { tasks } = await get<{ tasks: Task[] }>('/v1/svct/tasks?limit=100');
    view.append(table('Tasks, newest first', ['Name', 'Status', 'Progress', 'Created'], tasks.map((task) => [
      h('a', { href: `#/tasks/${task.id}` }, task.name), badge(task.status), progress(task.percentComplete), when(task.createdAt),
    ])));
  } catch (error) {
    view.append(errorBox(error));
  }
  return view;
}

export async function taskView(taskId: string, onLeave: (stop: () => void) => void): Promise<HTMLElement> {
  const base = `/v1/svct/tasks/${enc(taskId)}`;
  const { task } = await get<{ task: Task }>(base);
  const view = h('section', { 'aria-labelledby': 'task-title' },
    h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, 'Tasks'), ' / ', task.name),
    h('h1', { id: 'task-title' }, task.name),
    h('p', {}, 'Status ', badge(task.status), ' ', progress(task.percentComplete)),
    h('h2', {}, 'Log'), logPanel({ taskId }, onLeave).element);
  try {
    const { events } = await get<{ events: TaskEvent[] }>(`${base}/events?limit=100`);
    view.append(h('h2', {}, 'Events'), table('Events, oldest first', ['When', 'Message'], events.map((event) => [when(event.createdAt), event.message ?? ''])));
  } catch (error) {
    view.append(h('h2', {}, 'Events'), errorBox(error));
  }
  try {
    const { results } = await get<{ results: TaskResult[] }>(`${base}/results?limit=100`);
    view.append(h('h2', {}, 'Results'), table('Results', ['Name', 'Bytes', 'Created', ''], results.map((result) => [
      result.name, result.size ?? '', when(result.createdAt), download(`${base}/results/${enc(result.resultId)}/content`, result.name),
    ])));
  } catch (error) {
    view.append(h('h2', {}, 'Results'), errorBox(error));
  }
  return view;
}

function progress(percent: number | undefined) {
  if (percent === undefined) return '';
  return h('progress', { max: 100, value: percent, 'aria-label': `${percent}% complete` }, `${percent}%`);
}

/** A button that fetches the file with the bearer (a link cannot carry it) and saves it. */
function download(path: string, name: string): HTMLElement {
  const button = h('button', { type: 'button' }, 'Download');
  button.addEventListener('click', async () => {
    const response = await fetch(path, { headers: { authorization: `Bearer ${credential.get() ?? ''}` }, credentials: 'omit' });
    if (!response.ok) return void button.replaceWith(h('span', { class: 'error' }, `Download failed: ${response.status}`));
    const url = URL.createObjectURL(await response.blob());
    const link = h('a', { href: url, download: name.split('/').pop() || 'result' });
    link.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  });
  return button;
}
