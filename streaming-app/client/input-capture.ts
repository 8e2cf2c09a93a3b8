// Pointer and keyboard input on the video, sent to the app over the "input" DataChannel. Each event gets
// the next sequence number; the app stamps the newest one it applied into the frame barcode.
// Chrome already delivers pointermove once per animation frame, so events are sent as they come: any
// further batching would only add delay.
import type { InputMessage } from './protocol.ts';

export class InputCapture {
  readonly #video: HTMLVideoElement;
  #channel: RTCDataChannel | undefined;
  #seq = 0;
  onSent?: (seq: number, at: number) => void;

  constructor(video: HTMLVideoElement) {
    this.#video = video;
    video.addEventListener('pointermove', (event) => {
      const point = this.#toVideo(event.clientX, event.clientY);
      if (point) this.sendPointer(point.x, point.y);
    });
    video.addEventListener('pointerdown', () => video.focus());
    video.tabIndex = 0;
    video.addEventListener('keydown', (event) => {
      if (event.repeat || event.key.length > 32) return;
      this.sendKey(event.key);
      event.preventDefault();
    });
  }

  setChannel(channel: RTCDataChannel | undefined): void {
    this.#channel = channel;
  }

  get ready(): boolean {
    return this.#channel?.readyState === 'open';
  }

  /** x and y in 0..1 across the picture. Returns the sequence number, or undefined if not sent. */
  sendPointer(x: number, y: number): number | undefined {
    return this.#send((seq, t) => ({ type: 'pointer', seq, t, x, y }));
  }

  sendKey(key: string): number | undefined {
    return this.#send((seq, t) => ({ type: 'key', seq, t, key }));
  }

  #send(build: (seq: number, t: number) => InputMessage): number | undefined {
    const channel = this.#channel;
    if (channel?.readyState !== 'open') return undefined;
    const seq = ++this.#seq;
    const at = performance.now();
    channel.send(JSON.stringify(build(seq, at)));
    this.onSent?.(seq, at);
    return seq;
  }

  /** Maps a client point to 0..1 picture coordinates, allowing for letterboxing (object-fit: contain). */
  #toVideo(clientX: number, clientY: number): { x: number; y: number } | undefined {
    const video = this.#video;
    if (!video.videoWidth || !video.videoHeight) return undefined;
    const box = video.getBoundingClientRect();
    const scale = Math.min(box.width / video.videoWidth, box.height / video.videoHeight);
    const width = video.videoWidth * scale;
    const height = video.videoHeight * scale;
    const x = (clientX - box.left - (box.width - width) / 2) / width;
    const y = (clientY - box.top - (box.height - height) / 2) / height;
    if (x < 0 || x > 1 || y < 0 || y > 1) return undefined;
    return { x, y };
  }
}
