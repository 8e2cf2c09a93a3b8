// Keeps the last lines a helper process wrote, so that a failure can be reported with its own words.
import type { Readable } from 'node:stream';

export class LineTail {
  readonly #lines: string[] = [];
  readonly #keep: number;
  #partial = '';

  constructor(stream: Readable | null | undefined, keep = 20, onLine?: (line: string) => void) {
    this.#keep = keep;
    stream?.on('data', (chunk: Buffer) => {
      const lines = (this.#partial + chunk.toString()).split('\n');
      this.#partial = lines.pop() ?? '';
      for (const raw of lines) {
        const line = raw.trimEnd();
        if (!line) continue;
        this.add(line);
        onLine?.(line);
      }
    });
  }

  add(line: string): void {
    this.#lines.push(line.slice(0, 500));
    if (this.#lines.length > this.#keep) this.#lines.shift();
  }

  /** The last non-empty line, or ''. */
  last(): string {
    return (this.#partial.trim() || this.#lines.at(-1)) ?? '';
  }

  all(): string[] {
    return [...this.#lines];
  }
}
