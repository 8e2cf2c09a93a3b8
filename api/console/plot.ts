// A version's numbers (GET …/stats) as three small uPlot charts: requests/s, latency p50/p99, and errors
// with queue depth. Sizes follow the container, so the page works at narrow widths.
import uPlot from './vendor/uplot.js';
import { h } from './dom.ts';

type Numbers = {
  requests: number; requestsPerSecond: number; clientErrors: number; rateLimited: number; serverErrors: number;
  latencyMs: { p50: number; p99: number; mean: number } | null; queueDepth: { mean: number; max: number };
};
export type Stats = { since: string; until: string; stepSeconds: number; totals: Numbers; points: (Numbers & { at: string })[] };

const COLORS = ['#2f6fdd', '#d9480f', '#2b8a3e', '#7048e8'];

export function statsPlots(stats: Stats): HTMLElement {
  const at = stats.points.map((point) => Date.parse(point.at) / 1000);
  const pick = (value: (point: Numbers) => number | null) => stats.points.map(value);
  const charts: [string, string, [string, (number | null)[]][]][] = [
    ['Requests per second', 'req/s', [['requests/s', pick((p) => p.requestsPerSecond)]]],
    ['Latency', 'ms', [['p50', pick((p) => p.latencyMs?.p50 ?? null)], ['p99', pick((p) => p.latencyMs?.p99 ?? null)]]],
    ['Errors and queue', 'count', [
      ['4xx', pick((p) => p.clientErrors)], ['5xx', pick((p) => p.serverErrors)], ['429', pick((p) => p.rateLimited)],
      ['queue max', pick((p) => p.queueDepth.max)],
    ]],
  ];
  const box = h('div', { class: 'plots', 'data-points': stats.points.length, 'data-requests': stats.totals.requests });
  for (const [title, unit, series] of charts) {
    const figure = h('figure', { class: 'plot' }, h('figcaption', {}, title));
    box.append(figure);
    // Drawn once the figure is in the page, so its width is known.
    requestAnimationFrame(() => draw(figure, unit, at, series));
  }
  return box;
}

function draw(figure: HTMLElement, unit: string, at: number[], series: [string, (number | null)[]][]) {
  const width = Math.max(240, figure.clientWidth - 8);
  // Latency has gaps (a step without requests has none), so its points are drawn: a lone busy step shows.
  const options: uPlot.Options = {
    width, height: 160, legend: { show: true },
    axes: [{}, { label: unit, size: 50 }],
    series: [{}, ...series.map(([label], index) => ({ label, stroke: COLORS[index % COLORS.length], width: 2, spanGaps: false, ...(unit === 'ms' ? { points: { show: true, size: 5 } } : {}) }))],
  };
  const chart = new uPlot(options, [at, ...series.map(([, values]) => values)] as uPlot.AlignedData, figure);
  const resize = new ResizeObserver(() => chart.setSize({ width: Math.max(240, figure.clientWidth - 8), height: 160 }));
  resize.observe(figure);
}
