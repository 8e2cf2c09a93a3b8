// The last lines an instance wrote, for failure reports. Bounded in lines and in line length, so a
// chatty or binary-spewing program cannot grow the agent's memory.

const MAX_LINE_CHARS = 1000;

export class LogTail {
  readonly #lines: string[] = [];
  readonly #maxLines: number;
  #partial = '';

  constructor(maxLines = 50) {
    this.#maxLines = maxLines;
  }

  write(chunk: Buffer | string): void {
    const text = this.#partial + chunk.toString();
    const parts = text.split('\n');
    this.#partial = parts.pop()!.slice(-MAX_LINE_CHARS);
    for (const line of parts) this.#push(line);
  }

  /** Complete lines, plus the unfinished last one if any. */
  lines(): string[] {
    return this.#partial ? [...this.#lines, this.#partial].slice(-this.#maxLines) : [...this.#lines];
  }

  #push(line: string): void {
    const clean = line.endsWith('\r') ? line.slice(0, -1) : line;
    this.#lines.push(clean.length > MAX_LINE_CHARS ? `${clean.slice(0, MAX_LINE_CHARS)}…` : clean);
    if (this.#lines.length > this.#maxLines) this.#lines.shift();
  }
}
