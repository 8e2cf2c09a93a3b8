// Memory sizes as people and Kubernetes write them ("64Gi", "16 GB", "512Mi", "1073741824"): parsed to bytes.

const UNITS: Record<string, number> = {
  '': 1, b: 1,
  k: 1e3, kb: 1e3, m: 1e6, mb: 1e6, g: 1e9, gb: 1e9, t: 1e12, tb: 1e12,
  ki: 2 ** 10, kib: 2 ** 10, mi: 2 ** 20, mib: 2 ** 20, gi: 2 ** 30, gib: 2 ** 30, ti: 2 ** 40, tib: 2 ** 40,
};

/** Bytes, or undefined when `text` is not a positive size with one of the units above. */
export function parseByteSize(text: string): number | undefined {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? UNITS[match[2].toLowerCase()] : undefined;
  if (!match || unit === undefined) return undefined;
  const bytes = Math.floor(Number(match[1]) * unit);
  return bytes > 0 ? bytes : undefined;
}
