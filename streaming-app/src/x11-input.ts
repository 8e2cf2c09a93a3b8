// Browser input into the X display through XTEST: the server cannot tell these events from a real
// keyboard and mouse. Keys go by physical position (KeyboardEvent.code → evdev scancode → X keycode,
// the keycodes of Xvfb's default evdev keymap), so games and shortcuts see the key the user pressed
// whatever the layouts; text (IME, paste) goes by keysym, borrowing a spare keycode for characters the
// keymap lacks. Pressed keys and buttons are tracked and released when the session ends.
import type { InputMessage } from '../client/protocol.ts';
import { Modifier } from '../client/protocol.ts';
import type { XConnection } from './x11-display.ts';

const EVDEV_OFFSET = 8;

/** KeyboardEvent.code → Linux evdev scancode (input-event-codes.h). */
const EVDEV: Record<string, number> = {
  Escape: 1, Minus: 12, Equal: 13, Backspace: 14, Tab: 15, BracketLeft: 26, BracketRight: 27, Enter: 28,
  ControlLeft: 29, Semicolon: 39, Quote: 40, Backquote: 41, ShiftLeft: 42, Backslash: 43, Comma: 51, Period: 52,
  Slash: 53, ShiftRight: 54, NumpadMultiply: 55, AltLeft: 56, Space: 57, CapsLock: 58, NumLock: 69, ScrollLock: 70,
  Numpad7: 71, Numpad8: 72, Numpad9: 73, NumpadSubtract: 74, Numpad4: 75, Numpad5: 76, Numpad6: 77, NumpadAdd: 78,
  Numpad1: 79, Numpad2: 80, Numpad3: 81, Numpad0: 82, NumpadDecimal: 83, IntlBackslash: 86, F11: 87, F12: 88, IntlRo: 89,
  NumpadEnter: 96, ControlRight: 97, NumpadDivide: 98, PrintScreen: 99, AltRight: 100, Home: 102, ArrowUp: 103,
  PageUp: 104, ArrowLeft: 105, ArrowRight: 106, End: 107, ArrowDown: 108, PageDown: 109, Insert: 110, Delete: 111,
  NumpadEqual: 117, Pause: 119, NumpadComma: 121, IntlYen: 124, MetaLeft: 125, MetaRight: 126, ContextMenu: 127,
};
'1234567890'.split('').forEach((digit, i) => { EVDEV[`Digit${digit}`] = 2 + i; });
const LETTER_ROWS: [string, number][] = [['QWERTYUIOP', 16], ['ASDFGHJKL', 30], ['ZXCVBNM', 44]];
for (const [row, first] of LETTER_ROWS) row.split('').forEach((letter, i) => { EVDEV[`Key${letter}`] = first + i; });
for (let i = 1; i <= 10; i++) EVDEV[`F${i}`] = 58 + i;
for (let i = 13; i <= 24; i++) EVDEV[`F${i}`] = 170 + i;

export function keycodeOf(code: string): number | undefined {
  const scancode = EVDEV[code];
  return scancode === undefined ? undefined : scancode + EVDEV_OFFSET;
}

const MODIFIER_KEYS: [bit: number, codes: string[]][] = [
  [Modifier.shift, ['ShiftLeft', 'ShiftRight']], [Modifier.ctrl, ['ControlLeft', 'ControlRight']],
  [Modifier.alt, ['AltLeft', 'AltRight']], [Modifier.meta, ['MetaLeft', 'MetaRight']],
];

/** DOM button → X button. */
const X_BUTTON = [1, 2, 3, 8, 9];
const WHEEL_STEP = 100;

/** Keysym of one character: Latin-1 maps to itself, the rest of Unicode to 0x01000000 + code point. */
function keysymOf(char: string): number {
  const cp = char.codePointAt(0) ?? 0;
  if (char === '\n') return 0xff0d; // Return
  if (char === '\t') return 0xff09; // Tab
  return (cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xff) ? cp : 0x01000000 + cp;
}

export class X11Input {
  readonly #x: XConnection;
  readonly #held = new Set<number>();
  readonly #buttons = new Set<number>();
  /** keysym → [keycode, shift needed], from the server's keymap. */
  readonly #keysyms = new Map<number, [number, boolean]>();
  readonly #spare: number[] = [];
  #nextSpare = 0;
  #wheel = { x: 0, y: 0 };
  /** Sequence number of the newest event injected. */
  lastSeq = 0;

  private constructor(x: XConnection) {
    this.#x = x;
  }

  static async create(x: XConnection): Promise<X11Input> {
    const input = new X11Input(x);
    const mapping = await x.keyboardMapping();
    mapping.forEach((row, i) => {
      const keycode = x.minKeycode + i;
      if (row.every((keysym) => keysym === 0)) input.#spare.push(keycode);
      row.slice(0, 2).forEach((keysym, column) => {
        if (keysym !== 0 && !input.#keysyms.has(keysym)) input.#keysyms.set(keysym, [keycode, column === 1]);
      });
    });
    return input;
  }

  /** Applies one event; returns false when it cannot be expressed on this display (counted as dropped). */
  apply(event: InputMessage): boolean {
    if (!this.#inject(event)) return false;
    this.lastSeq = event.seq;
    return true;
  }

  #inject(event: InputMessage): boolean {
    const { xtest } = this.#x;
    switch (event.type) {
      case 'pointer':
        xtest.FakeInput(xtest.MotionNotify, 0, 0, this.#x.root,
          Math.round(clamp01(event.x) * (this.#x.width - 1)), Math.round(clamp01(event.y) * (this.#x.height - 1)));
        return true;
      case 'move':
        xtest.FakeInput(xtest.MotionNotify, 1, 0, 0, Math.round(event.dx), Math.round(event.dy));
        return true;
      case 'button':
        this.#button(X_BUTTON[event.button], event.down);
        return true;
      case 'wheel':
        this.#scroll(event.dx, event.dy);
        return true;
      case 'key':
        return this.#key(event);
      case 'text':
        for (const char of event.text) this.#type(char);
        return true;
      case 'clipboard':
        return false; // not input: the x11 source puts it on the display's clipboard (x11-clipboard.ts)
    }
  }

  #button(button: number, down: boolean): void {
    if (down === this.#buttons.has(button)) return;
    if (down) this.#buttons.add(button);
    else this.#buttons.delete(button);
    this.#x.xtest.FakeInput(down ? this.#x.xtest.ButtonPress : this.#x.xtest.ButtonRelease, button, 0, 0, 0, 0);
  }

  /** Wheel deltas accumulate until a whole notch: X scrolls by clicks of buttons 4/5 (vertical) and 6/7. */
  #scroll(dx: number, dy: number): void {
    this.#wheel.x += dx;
    this.#wheel.y += dy;
    const clicks = (value: number): number => Math.trunc(value / WHEEL_STEP);
    const steps: [number, number][] = [[clicks(this.#wheel.y), 4], [clicks(this.#wheel.x), 6]];
    this.#wheel.y -= clicks(this.#wheel.y) * WHEEL_STEP;
    this.#wheel.x -= clicks(this.#wheel.x) * WHEEL_STEP;
    for (const [count, negative] of steps) {
      const button = count < 0 ? negative : negative + 1;
      for (let i = 0; i < Math.min(Math.abs(count), 20); i++) {
        this.#x.xtest.FakeInput(this.#x.xtest.ButtonPress, button, 0, 0, 0, 0);
        this.#x.xtest.FakeInput(this.#x.xtest.ButtonRelease, button, 0, 0, 0, 0);
      }
    }
  }

  #key(event: Extract<InputMessage, { type: 'key' }>): boolean {
    const down = event.down ?? true;
    const keycode = event.code ? keycodeOf(event.code) : undefined;
    if (keycode === undefined) {
      // No physical key (an old client, or a code this table lacks): type the character itself.
      if (down && [...event.key].length === 1) {
        this.#type(event.key);
        return true;
      }
      return false;
    }
    if (down && event.mods !== undefined) this.#syncModifiers(event.mods, event.code ?? '');
    this.#press(keycode, down);
    return true;
  }

  /** Brings the held modifiers in line with the browser's (a key released while the page had no focus). */
  #syncModifiers(mods: number, pressing: string): void {
    for (const [bit, codes] of MODIFIER_KEYS) {
      if (codes.includes(pressing)) continue;
      const keycodes = codes.map((code) => keycodeOf(code) ?? 0);
      const held = keycodes.filter((code) => this.#held.has(code));
      if (mods & bit) {
        if (held.length === 0) this.#press(keycodes[0], true);
      } else {
        for (const code of held) this.#press(code, false);
      }
    }
  }

  #press(keycode: number, down: boolean): void {
    if (down) this.#held.add(keycode);
    else if (!this.#held.delete(keycode)) return;
    this.#x.xtest.FakeInput(down ? this.#x.xtest.KeyPress : this.#x.xtest.KeyRelease, keycode, 0, 0, 0, 0);
  }

  #type(char: string): void {
    const keysym = keysymOf(char);
    let entry = this.#keysyms.get(keysym);
    if (!entry) {
      if (this.#spare.length === 0) return;
      // Borrow a keycode with no symbols: map it to this keysym (same in both columns, so no shift).
      const keycode = this.#spare[this.#nextSpare++ % this.#spare.length];
      for (const [sym, [code]] of this.#keysyms) if (code === keycode) this.#keysyms.delete(sym);
      this.#x.client.ChangeKeyboardMapping(keycode, 2, [keysym, keysym]);
      entry = [keycode, false];
      this.#keysyms.set(keysym, entry);
    }
    const [keycode, shift] = entry;
    const shiftCode = keycodeOf('ShiftLeft') ?? 50;
    const shiftHeld = this.#held.has(shiftCode) || this.#held.has(keycodeOf('ShiftRight') ?? 62);
    const { xtest } = this.#x;
    if (shift && !shiftHeld) xtest.FakeInput(xtest.KeyPress, shiftCode, 0, 0, 0, 0);
    xtest.FakeInput(xtest.KeyPress, keycode, 0, 0, 0, 0);
    xtest.FakeInput(xtest.KeyRelease, keycode, 0, 0, 0, 0);
    if (shift && !shiftHeld) xtest.FakeInput(xtest.KeyRelease, shiftCode, 0, 0, 0, 0);
  }

  /** Lets go of every key and button still held (session end, a new peer connection). */
  releaseAll(): void {
    for (const keycode of [...this.#held]) this.#press(keycode, false);
    for (const button of [...this.#buttons]) this.#button(button, false);
  }
}

function clamp01(value: number): number {
  return Math.min(1, Math.max(0, value));
}
