// What has started, stopped in reverse order: by the platform's close(), or by a start-up that fails
// half-way (main.ts), so that what started last, and may use what started before it, stops first.
export type Closer = () => unknown;

export class Closers {
  readonly #closers: Closer[];

  constructor(...started: Closer[]) {
    this.#closers = started;
  }

  /** What has just started: stopped before everything that started earlier. */
  add(...closers: Closer[]): void {
    this.#closers.push(...closers);
  }

  /** One after the other, the last added first; a closer that throws stops the rest. */
  async closeAll(): Promise<void> {
    for (const close of this.#closers.splice(0).reverse()) await close();
  }
}
