// The X display the application draws on: a virtual one (Xvfb, on a display number it picks itself with
// -displayfd, at the session's resolution), or an existing one (STREAMING_DISPLAY). The app talks to it
// through its own protocol connection (the `x11` package, pure JavaScript): to see that the application
// has mapped a window, to inject input with the XTEST extension, and to capture the screen (DAMAGE,
// XFIXES, MIT-SHM; x11-capture.ts).
import type { ChildProcess } from 'node:child_process';
import x11, { type XClient, type XDamage, type XDisplay, type XFixes, type XShm, type XTest } from 'x11';
import { exited, spawnChild, stopChild } from './children.ts';
import { LineTail } from './line-tail.ts';

const XVFB_START_TIMEOUT_MS = 15_000;
const CONNECT_TIMEOUT_MS = 5_000;
const WINDOW_POLL_MS = 50;
const MAP_STATE_VIEWABLE = 2;
const REVERT_TO_POINTER_ROOT = 1;

export type VirtualDisplay = { display: string; child: ChildProcess; stop(): Promise<void> };

/** Starts Xvfb on a free display number; rejects with one readable line if it cannot. */
export async function startXvfb(xvfbPath: string, width: number, height: number): Promise<VirtualDisplay> {
  // fd 3: Xvfb writes the display number it chose once it accepts connections.
  const child = spawnChild(xvfbPath, ['-displayfd', '3', '-screen', '0', `${width}x${height}x24`, '-nolisten', 'tcp', '-noreset', '-dpi', '96'],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
  const stderr = new LineTail(child.stderr);
  const displayNumber = new Promise<string>((resolve, reject) => {
    let text = '';
    child.stdio[3]?.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (text.includes('\n')) resolve(text.trim());
    });
    void exited(child).then(({ code, signal }) => reject(new Error(`Xvfb exited (${code ?? signal}) before opening a display: ${stderr.last() || 'no message'}`)));
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Xvfb did not open a display within ${XVFB_START_TIMEOUT_MS / 1000} s`)), XVFB_START_TIMEOUT_MS);
  });
  try {
    const number = await Promise.race([displayNumber, timeout]);
    return { display: `:${number}`, child, stop: () => stopChild(child) };
  } catch (error) {
    await stopChild(child);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

type Extensions = { xtest: XTest; damage: XDamage; fixes: XFixes; shm: XShm | undefined };

/**
 * The capture reads the screen as 24-bit colour in 32-bit pixels, least significant byte first (B, G, R,
 * unused: Xvfb's, and any x86 Xorg's, format). Anything else is refused up front.
 */
function checkPixelFormat(display: XDisplay): void {
  const depth = display.screen[0].root_depth;
  if (depth !== 24 || display.format[24]?.bits_per_pixel !== 32 || display.image_byte_order !== 0) {
    throw new Error(`unsupported pixel format (depth ${depth}, ${display.format[depth]?.bits_per_pixel} bits per pixel): the display must be 24-bit colour in 32-bit pixels`);
  }
}

/** One protocol connection to the display, with the extensions the app uses. */
export class XConnection {
  readonly client: XClient;
  readonly xtest: XTest;
  readonly damage: XDamage;
  readonly fixes: XFixes;
  /** MIT-SHM, when the server has it (local displays); capture falls back to core GetImage without it. */
  readonly shm: XShm | undefined;
  readonly root: number;
  readonly width: number;
  readonly height: number;
  readonly minKeycode: number;
  readonly maxKeycode: number;

  private constructor(display: XDisplay, extensions: Extensions) {
    this.client = display.client;
    ({ xtest: this.xtest, damage: this.damage, fixes: this.fixes, shm: this.shm } = extensions);
    const screen = display.screen[0];
    this.root = screen.root;
    this.width = screen.pixel_width;
    this.height = screen.pixel_height;
    this.minKeycode = display.min_keycode;
    this.maxKeycode = display.max_keycode;
  }

  static async open(display: string): Promise<XConnection> {
    const opened = new Promise<XDisplay>((resolve, reject) => {
      x11.createClient({ display }, (error, value) => (error ? reject(error) : resolve(value)));
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('no answer')), CONNECT_TIMEOUT_MS);
    });
    try {
      const connected = await Promise.race([opened, timeout]);
      checkPixelFormat(connected);
      const { client } = connected;
      const extension = <T>(load: (callback: (error: Error | null, ext: T) => void) => void, name: string): Promise<T> =>
        new Promise((resolve, reject) => load((error, ext) => (error ? reject(new Error(`the display has no ${name} extension`)) : resolve(ext))));
      const xtest = await extension<XTest>((cb) => client.require('xtest', cb), 'XTEST');
      const damage = await extension<XDamage>((cb) => client.require('damage', cb), 'DAMAGE');
      const fixes = await extension<XFixes>((cb) => client.require('fixes', cb), 'XFIXES');
      const shm = await extension<XShm>((cb) => client.require('shm', cb), 'MIT-SHM').catch(() => undefined);
      return new XConnection(connected, { xtest, damage, fixes, shm });
    } catch (error) {
      throw new Error(`cannot open X display ${display}: ${(error as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Calls `listener` once if the connection to the display is lost. */
  onLost(listener: (why: string) => void): void {
    let told = false;
    const tell = (why: string): void => { if (!told) { told = true; listener(why); } };
    this.client.on('end', () => tell('connection to the X display closed'));
    this.client.on('error', (error) => tell(`X display error: ${error?.message ?? 'unknown'}`));
  }

  /**
   * Resolves with the topmost mapped top-level window once there is one; `failed()` is checked between
   * polls (e.g. the app exited).
   */
  async waitForWindow(timeoutMs: number, failed: () => string | undefined): Promise<number> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const reason = failed();
      if (reason) throw new Error(reason);
      const window = await this.#topViewableWindow();
      if (window !== undefined) return window;
      if (performance.now() > deadline) throw new Error(`the application showed no window within ${Math.round(timeoutMs / 1000)} s`);
      await new Promise((resolve) => setTimeout(resolve, WINDOW_POLL_MS));
    }
  }

  async #topViewableWindow(): Promise<number | undefined> {
    const tree = await this.#call<{ children: number[] }>((cb) => this.client.QueryTree(this.root, cb));
    for (const window of tree.children.toReversed()) { // stacking order: the last child is on top
      const attributes = await this.#call<{ mapState: number }>((cb) => this.client.GetWindowAttributes(window, cb)).catch(() => undefined);
      if (attributes?.mapState === MAP_STATE_VIEWABLE) return window;
    }
    return undefined;
  }

  /**
   * Keyboard focus to `window`, back to "wherever the pointer is" once it is gone. Without a window
   * manager the focus otherwise follows the pointer, and keys typed with the pointer off the app's window
   * would reach nobody.
   */
  focus(window: number): void {
    this.client.SetInputFocus(window, REVERT_TO_POINTER_ROOT);
  }

  keyboardMapping(): Promise<number[][]> {
    return this.#call((cb) => this.client.GetKeyboardMapping(this.minKeycode, this.maxKeycode - this.minKeycode + 1, cb));
  }

  /** Where the pointer is and which buttons and modifiers are down (keyMask, X's state bits). */
  pointer(): Promise<{ rootX: number; rootY: number; keyMask: number }> {
    return this.#call((cb) => this.client.QueryPointer(this.root, cb));
  }

  /** A round trip: resolves once the server has processed every request sent before. */
  sync(): Promise<unknown> {
    return this.#call((cb) => this.client.GetInputFocus(cb));
  }

  #call<T>(request: (callback: (error: Error | null, value: T) => void) => void): Promise<T> {
    return new Promise((resolve, reject) => request((error, value) => (error ? reject(error) : resolve(value))));
  }

  close(): void {
    this.client.on('error', () => { /* a reset while closing (the server went first) is no failure */ });
    try { this.client.terminate(); } catch { /* already closed */ }
  }
}
