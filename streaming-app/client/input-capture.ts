// Pointer, buttons, wheel, keyboard and text on the video, sent to the app over the "input" DataChannel
// (message types in protocol.ts). Each event gets the next sequence number; the app stamps the newest one
// it applied into the frame barcode. Chrome already delivers pointermove once per animation frame, so
// events are sent as they come: any further batching would only add delay.
//
// Two pointer modes: absolute (0..1 across the picture, the default) and relative under pointer lock
// (enterRelativeMode(), for games and 3D viewers: movementX/Y scaled to video pixels). Keys are sent by
// KeyboardEvent.code with the modifier state; held keys and buttons are released when the page loses focus.
//
// Clipboard text both ways: sendClipboard() puts text on the app's clipboard; what is copied in the app
// arrives as a `clipboard` message (clipboardText, onClipboard) and is written to the browser's clipboard
// when the page may. When the page already has permission to read the browser's clipboard, its text goes
// to the app each time the video gets the focus, so a copy elsewhere can be pasted in the app.
import type { AppClipboardMessage, InputMessage } from './protocol.ts';
import { CLIPBOARD_MAX_BYTES, Modifier } from './protocol.ts';

type Payload = InputMessage extends infer M ? M extends InputMessage ? Omit<M, 'seq' | 't'> : never : never;

/** Wheel deltas in pixels whatever the device reports (deltaMode 1 = lines, 2 = pages). */
const WHEEL_MODE_PIXELS = [1, 40, 800];
/** The app's SCTP takes messages of at most 64 KiB. */
const MAX_MESSAGE_BYTES = 64 * 1024;
/**
 * Input given while the channel is not open yet (the picture comes as soon as DTLS is done, the channel
 * after its SCTP set-up, up to a second later on a lossy link) is held, at most this much and this long:
 * a key pressed seconds ago, or for another session, is better dropped than typed late.
 */
const MAX_HELD_EVENTS = 256;
const MAX_HELD_MS = 2000;

export class InputCapture {
  readonly #video: HTMLVideoElement;
  readonly #heldKeys = new Map<string, string>();
  readonly #heldButtons = new Set<number>();
  #channel: RTCDataChannel | undefined;
  /** Input given before the channel opened; pointer moves are not held (the next one says where it is). */
  #held: { payload: Payload; at: number }[] = [];
  #seq = 0;
  #clipboardSent: string | undefined;
  onSent?: (seq: number, at: number) => void;
  /** The text last copied in the app (undefined until something is). */
  clipboardText: string | undefined;
  onClipboard?: (text: string) => void;

  constructor(video: HTMLVideoElement) {
    this.#video = video;
    video.tabIndex = 0;
    // Touch acts as the pointer (pointer events): no panning or zooming of the page under the finger.
    video.style.touchAction = 'none';
    video.addEventListener('pointermove', (event) => this.#pointerMove(event));
    video.addEventListener('pointerdown', (event) => {
      video.focus();
      this.#pointerAt(event);
      this.sendButton(event.button, true);
    });
    video.addEventListener('pointerup', (event) => this.sendButton(event.button, false));
    video.addEventListener('contextmenu', (event) => event.preventDefault());
    video.addEventListener('wheel', (event) => {
      event.preventDefault();
      const scale = WHEEL_MODE_PIXELS[event.deltaMode] ?? 1;
      this.sendWheel(event.deltaX * scale, event.deltaY * scale);
    }, { passive: false });
    video.addEventListener('keydown', (event) => {
      event.preventDefault();
      // The app's display repeats held keys itself.
      if (!event.repeat) this.sendKeyCode(event.code, event.key, true, modifiersOf(event));
    });
    video.addEventListener('keyup', (event) => {
      event.preventDefault();
      this.sendKeyCode(event.code, event.key, false, modifiersOf(event));
    });
    video.addEventListener('paste', (event) => {
      const text = event.clipboardData?.getData('text/plain');
      if (text) this.sendText(text);
      event.preventDefault();
    });
    video.addEventListener('blur', () => this.releaseAll());
    video.addEventListener('focus', () => void this.#offerBrowserClipboard());
  }

  setChannel(channel: RTCDataChannel | undefined): void {
    this.#channel?.removeEventListener('message', this.#onAppMessage);
    this.#channel = channel;
    channel?.addEventListener('message', this.#onAppMessage);
    const held = this.#held.filter((event) => performance.now() - event.at <= MAX_HELD_MS);
    this.#held = [];
    for (const event of held) this.#send(event.payload);
  }

  get ready(): boolean {
    return this.#channel?.readyState === 'open';
  }

  /** True while the pointer is locked to the video and moves are sent as relative motion. */
  get relative(): boolean {
    return document.pointerLockElement === this.#video;
  }

  /** Pointer lock: needs a user gesture (call it from a click handler). Resolves when locked. */
  async enterRelativeMode(): Promise<void> {
    await this.#video.requestPointerLock();
  }

  exitRelativeMode(): void {
    if (this.relative) document.exitPointerLock();
  }

  /** x and y in 0..1 across the picture. Returns the sequence number, or undefined if not sent. */
  sendPointer(x: number, y: number): number | undefined {
    return this.#send({ type: 'pointer', x, y });
  }

  /** A relative move in video pixels (what pointer lock produces). */
  sendMove(dx: number, dy: number): number | undefined {
    return this.#send({ type: 'move', dx, dy });
  }

  /** DOM button number (0 left, 1 middle, 2 right, 3 back, 4 forward). */
  sendButton(button: number, down: boolean): number | undefined {
    if (button < 0 || button > 4) return undefined;
    if (down) this.#heldButtons.add(button);
    else this.#heldButtons.delete(button);
    return this.#send({ type: 'button', button, down });
  }

  /** Wheel deltas in pixels; about 100 per notch. */
  sendWheel(dx: number, dy: number): number | undefined {
    return this.#send({ type: 'wheel', dx, dy });
  }

  /** A physical key by KeyboardEvent.code (e.g. "KeyA", "ShiftLeft"), with the modifier bits of protocol.ts. */
  sendKeyCode(code: string, key: string, down: boolean, mods = 0): number | undefined {
    if (!code || key.length > 32) return undefined;
    if (down) this.#heldKeys.set(code, key);
    else this.#heldKeys.delete(code);
    return this.#send({ type: 'key', key: key || code, code, down, mods });
  }

  /** A key press by its character alone (no physical key); the test scene's colour keys use it. */
  sendKey(key: string): number | undefined {
    return this.#send({ type: 'key', key });
  }

  /** Text typed into the app as characters (paste, IME, scripted text). */
  sendText(text: string): number | undefined {
    return text ? this.#send({ type: 'text', text: text.slice(0, 1024) }) : undefined;
  }

  /** Puts text on the app's clipboard; undefined (not sent) beyond CLIPBOARD_MAX_BYTES of UTF-8. */
  sendClipboard(text: string): number | undefined {
    if (new TextEncoder().encode(text).length > CLIPBOARD_MAX_BYTES) return undefined;
    this.#clipboardSent = text;
    return this.#send({ type: 'clipboard', text });
  }

  /** Lets go of everything held: the app would otherwise see a key stuck down after a focus change. */
  releaseAll(): void {
    for (const [code, key] of [...this.#heldKeys]) this.sendKeyCode(code, key, false);
    for (const button of [...this.#heldButtons]) this.sendButton(button, false);
  }

  #pointerMove(event: PointerEvent): void {
    if (this.relative) {
      const scale = this.#videoScale();
      if (scale && (event.movementX || event.movementY)) this.sendMove(event.movementX / scale, event.movementY / scale);
      return;
    }
    this.#pointerAt(event);
  }

  #pointerAt(event: PointerEvent): void {
    if (this.relative) return;
    const point = this.#toVideo(event.clientX, event.clientY);
    if (point) this.sendPointer(point.x, point.y);
  }

  #onAppMessage = (event: MessageEvent): void => {
    let message: Partial<AppClipboardMessage>;
    try {
      message = JSON.parse(String(event.data)) as Partial<AppClipboardMessage>;
    } catch {
      return;
    }
    if (message.type !== 'clipboard' || typeof message.text !== 'string') return;
    this.clipboardText = message.text;
    this.#clipboardSent = message.text; // already the app's: not worth sending back
    this.onClipboard?.(message.text);
    // Allowed while the page has the focus; otherwise the text stays in clipboardText.
    navigator.clipboard?.writeText(message.text).catch(() => undefined);
  };

  /** The browser's clipboard to the app, if the page may read it without asking and it changed. */
  async #offerBrowserClipboard(): Promise<void> {
    try {
      const permission = await navigator.permissions.query({ name: 'clipboard-read' as PermissionName });
      if (permission.state !== 'granted') return;
      const text = await navigator.clipboard.readText();
      if (text && text !== this.#clipboardSent) this.sendClipboard(text);
    } catch { /* no clipboard access in this browser or context */ }
  }

  #send(payload: Payload): number | undefined {
    const channel = this.#channel;
    if (channel?.readyState !== 'open') {
      if (payload.type !== 'pointer' && payload.type !== 'move' && this.#held.length < MAX_HELD_EVENTS) this.#held.push({ payload, at: performance.now() });
      return undefined;
    }
    const seq = this.#seq + 1;
    const at = performance.now();
    const message = JSON.stringify({ ...payload, seq, t: at });
    // At most 3 bytes of UTF-8 per UTF-16 unit: only a long message needs counting.
    if (message.length > MAX_MESSAGE_BYTES / 3 && new TextEncoder().encode(message).length > MAX_MESSAGE_BYTES) return undefined;
    this.#seq = seq;
    channel.send(message);
    this.onSent?.(seq, at);
    return seq;
  }

  /** CSS pixels per video pixel of the displayed picture (object-fit: contain). */
  #videoScale(): number | undefined {
    const video = this.#video;
    if (!video.videoWidth || !video.videoHeight) return undefined;
    const box = video.getBoundingClientRect();
    return Math.min(box.width / video.videoWidth, box.height / video.videoHeight);
  }

  /** Maps a client point to 0..1 picture coordinates, allowing for letterboxing (object-fit: contain). */
  #toVideo(clientX: number, clientY: number): { x: number; y: number } | undefined {
    const video = this.#video;
    const scale = this.#videoScale();
    if (!scale) return undefined;
    const box = video.getBoundingClientRect();
    const width = video.videoWidth * scale;
    const height = video.videoHeight * scale;
    const x = (clientX - box.left - (box.width - width) / 2) / width;
    const y = (clientY - box.top - (box.height - height) / 2) / height;
    if (x < 0 || x > 1 || y < 0 || y > 1) return undefined;
    return { x, y };
  }
}

function modifiersOf(event: KeyboardEvent): number {
  return (event.shiftKey ? Modifier.shift : 0) | (event.ctrlKey ? Modifier.ctrl : 0)
    | (event.altKey ? Modifier.alt : 0) | (event.metaKey ? Modifier.meta : 0);
}
