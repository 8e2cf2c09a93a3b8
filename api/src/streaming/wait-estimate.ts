// The wait shown to people in line: rough, from how long the function's sessions have lasted.

export class WaitEstimate {
  /** functionId → mean session length (ms), weighted to the recent ones. */
  readonly #meanSessionMs = new Map<string, number>();

  /** A session of the function that streamed ended, `ms` after its grant. */
  ended(functionId: string, ms: number) {
    const mean = this.#meanSessionMs.get(functionId);
    this.#meanSessionMs.set(functionId, mean === undefined ? ms : 0.7 * mean + 0.3 * ms);
  }

  /**
   * Seconds until `position` in line gets one of `instances`: the sessions ahead, shared among them, times
   * the mean session length; undefined before a session of the function has ended.
   */
  secondsFor(functionId: string, position: number, instances: number): number | undefined {
    const mean = this.#meanSessionMs.get(functionId);
    if (mean === undefined) return undefined;
    return Math.ceil((Math.ceil(position / Math.max(1, instances)) * mean) / 1000);
  }
}
