// The log panel of a version, a task, or the watch view: the kept lines, then new ones as they are written.
// A version's log can be narrowed to one instance (the logs API's instanceId); every instance seen while
// the view is open stays in the list, since an ended instance's lines are kept for a while.
import { errorBox, h } from '../dom.ts';
import { followLogs, LOGS_UNAVAILABLE, type LogLine, type LogSource } from '../logs.ts';

export interface LogPanel {
  element: HTMLElement;
  /** The version's instances now, for the filter. */
  showInstances(instanceIds: string[]): void;
}

export function logPanel(source: LogSource, onLeave: (stop: () => void) => void): LogPanel {
  const lines = h('pre', { class: 'log', id: 'log', tabindex: 0, 'aria-label': 'Log' });
  const state = h('div', { class: 'hint', id: 'log-state' });
  let stop = () => {};
  const follow = (from: LogSource) => {
    stop();
    lines.replaceChildren();
    lines.hidden = false;
    state.replaceChildren('Reading the kept lines…');
    stop = followLogs(from, {
      line: (line) => appendLine(lines, line),
      caughtUp: () => state.replaceChildren(lines.childElementCount ? 'Following: new lines appear as they are written.' : 'No lines yet; following.'),
      unavailable: (error) => {
        state.replaceChildren(errorBox(`${LOGS_UNAVAILABLE} ${error.message}`));
        lines.hidden = true;
      },
      ended: () => state.replaceChildren('The log stopped following: the platform closed the stream. Reload the page to follow again.'),
      failed: (error) => state.replaceChildren(errorBox(error)),
    });
  };
  follow(source);
  onLeave(() => stop());

  if ('taskId' in source) return { element: h('div', {}, state, lines), showInstances: () => {} };
  const filter = h('select', { id: 'log-instance' }, h('option', { value: '' }, 'All instances'));
  filter.addEventListener('change', () => follow({ ...source, instanceId: filter.value || undefined }));
  return {
    element: h('div', {}, h('p', { class: 'log-filter' }, h('label', { for: 'log-instance' }, 'Instance '), filter), state, lines),
    showInstances(instanceIds) {
      const listed = new Set([...filter.options].map((option) => option.value));
      for (const id of instanceIds) if (!listed.has(id)) filter.append(h('option', { value: id }, id.slice(0, 8)));
    },
  };
}

/** One line: time, instance, stderr marked; the last 2000 lines kept; scrolled to the end unless the reader scrolled up. */
function appendLine(box: HTMLElement, line: LogLine) {
  const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  const time = line.timestamp ? new Date(line.timestamp).toLocaleTimeString() : '';
  box.append(h('span', { class: line.stream === 'stderr' ? 'stderr' : 'stdout', 'data-instance': line.instanceId },
    h('span', { class: 'log-meta' }, [time, line.instanceId?.slice(0, 8)].filter(Boolean).join(' '), ' '), line.text, '\n'));
  if (box.childElementCount > 2000) box.firstElementChild?.remove();
  if (atEnd) box.scrollTop = box.scrollHeight;
}
