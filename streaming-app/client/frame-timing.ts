// Which requestVideoFrameCallback callback times a frame. When frames come close together, the video's
// current frame, read in a callback, is often one newer than the frame the callback describes: such a frame
// is held until the callback whose mediaTime reaches its timestamp, so its inputs are timed by the moment
// it, not the frame before it, was shown.

/** What was read in a callback: the newest input the frame shows, and its timestamp when it is known. */
export type ReadFrame = { inputSeq: number; timestampUs: number | undefined };

export class FrameTiming {
  #ahead: ReadFrame | undefined;

  /**
   * One callback: `mediaTime` (s) is its frame's, `read` what was read in it. Answers the newest input the
   * callback's frame shows, if a frame read now or earlier is that frame.
   */
  shown(mediaTime: number, read: ReadFrame | undefined): number | undefined {
    // µs from s can land a hair off the timestamp itself
    const reached = (frame: ReadFrame) => frame.timestampUs === undefined || frame.timestampUs <= mediaTime * 1e6 + 1;
    let inputSeq: number | undefined;
    if (this.#ahead && reached(this.#ahead)) {
      inputSeq = this.#ahead.inputSeq;
      this.#ahead = undefined;
    }
    if (read && reached(read)) {
      inputSeq = read.inputSeq;
      this.#ahead = undefined;
    } else if (read) {
      this.#ahead = read;
    }
    return inputSeq;
  }
}
