// The log panel of a version, a task, or the watch view: the kept lines, then new ones as they are written.
import { errorBox, h } from '../dom.ts';
import { followLogs, LOGS_UNAVAILABLE, type LogLine, type LogSource } from '../logs.ts';

export function logPanel(source: LogSource, onLeave: (stop: () => void) => void): HTMLElement {
  const lines = h('pre', { class: 'log', id: 'log', tabindex: 0, 'aria-label': 'Log' });
  const state = h('p', { class: 'hint', id: 'log-state' }, 'Reading the kept lines…');
  const stop = followLogs(source, {
    line: (line) => appendLine(lines, line),
    caughtUp: () => state.replaceChildren(lines.childElementCount ? 'Following: new lines appear as they are written.' : 'No lines yet; following.'),
    unavailable: () => {
      state.replaceChildren(LOGS_UNAVAILABLE);
      lines.hidden = true;
    },
    failed: (error) => state.replaceChildren(errorBox(error)),
  });
  onLeave(stop);
  return h('div', {}, state, lines);
}

/** One line: time, instance, stderr marked; the last 2000 lines kept; scrolled to the end unless the reader scrolled up. */
function appendLine(box: HTMLElement, line: LogLine) {
  const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  const time = line.timestamp ? new Date(line.timestamp).toLocaleTimeString() : '';
  box.append(h('span', { class: line.stream === 'stderr' ? 'stderr' : 'stdout' },
    h('span', { class: 'log-meta' }, [time, line.instanceId?.slice(0, 8)].filter(Boolean).join(' '), ' '), line.text, '\n'));
  if (box.childElementCount > 2000) box.firstElementChild?.remove();
  if (atEnd) box.scrollTop = box.scrollHeight;
}
