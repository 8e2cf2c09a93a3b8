// Benchmark output: one aligned table per benchmark, figures rounded for reading.

export function printTable(title: string, columns: string[], rows: (string | number)[][]): void {
  const cells = rows.map((row) => row.map((cell) => typeof cell === 'number' ? format(cell) : cell));
  const widths = columns.map((column, index) => Math.max(column.length, ...cells.map((row) => row[index].length)));
  const line = (values: string[]) => values.map((value, index) => index === 0 ? value.padEnd(widths[index]) : value.padStart(widths[index])).join('  ');
  console.log(`\n${title}\n${line(columns)}\n${widths.map((width) => '-'.repeat(width)).join('  ')}`);
  for (const row of cells) console.log(line(row));
}

function format(value: number): string {
  if (!Number.isFinite(value)) return '-';
  if (Math.abs(value) >= 100) return Math.round(value).toLocaleString('en-US');
  return value.toFixed(2);
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export function median(values: number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
}
