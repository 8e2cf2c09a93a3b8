// Human output: aligned tables and key/value blocks. `--json` bypasses all of it.

export function table(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return '(none)';
  const cells = rows.map((row) => columns.map((column) => text(row[column])));
  const widths = columns.map((column, index) => Math.max(column.length, ...cells.map((row) => row[index].length)));
  const line = (values: string[]) => values.map((value, index) => value.padEnd(widths[index])).join('  ').trimEnd();
  return [line(columns.map((column) => column.toUpperCase())), ...cells.map(line)].join('\n');
}

export function fields(record: Record<string, unknown>): string {
  const width = Math.max(...Object.keys(record).map((key) => key.length));
  return Object.entries(record).map(([key, value]) => `${key.padEnd(width)}  ${text(value)}`).join('\n');
}

function text(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (Array.isArray(value)) return value.map(text).join(',');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** 30d, 12h, 90m, 3600s, or a bare number of seconds → seconds. */
export function parseDuration(value: string, flag: string): number {
  const match = /^(\d+)([smhd]?)$/.exec(value.trim());
  if (!match) throw new Error(`${flag} must look like 30d, 12h, 90m or 3600s`);
  const unit = { '': 1, s: 1, m: 60, h: 3600, d: 86_400 }[match[2] as '' | 's' | 'm' | 'h' | 'd'];
  return Number(match[1]) * unit;
}
