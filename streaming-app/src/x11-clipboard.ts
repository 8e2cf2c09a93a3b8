// Clipboard text between the browser and the X display, by the X selection protocol (ICCCM) on the app's
// own connection. Browser to app: the app takes ownership of CLIPBOARD and PRIMARY with the browser's
// text and hands it to whoever asks (Ctrl+V, Shift+Insert and middle-click all paste it). App to browser:
// XFIXES reports every new owner of CLIPBOARD (something was copied); the app converts the selection to
// UTF-8 text and passes it on. PRIMARY (mere selected text) is not sent back: it changes with every
// selection, and toolkits do not re-announce it while a selection grows. Text is capped at
// CLIPBOARD_MAX_BYTES, small enough for one property transfer (no INCR).
import { CLIPBOARD_MAX_BYTES } from '../client/protocol.ts';
import type { XEvent } from 'x11';
import type { Logger } from './logger.ts';
import type { XConnection } from './x11-display.ts';

// Predefined atoms and core event types of the X protocol.
const PRIMARY = 1;
const ATOM = 4;
const STRING = 31;
const SELECTION_REQUEST = 30;
const SELECTION_NOTIFY = 31;
const INPUT_ONLY = 2;
const CURRENT_TIME = 0;

type Atoms = Record<'CLIPBOARD' | 'UTF8_STRING' | 'TEXT' | 'TARGETS' | 'INCR' | 'SVC_CLIPBOARD', number>;

export class X11Clipboard {
  readonly #x: XConnection;
  readonly #atoms: Atoms;
  readonly #window: number;
  readonly #log: Logger;
  readonly #onCopied: (text: string) => void;
  /** What the browser last put on the clipboard (served while the app owns the selections). */
  #text = Buffer.alloc(0);

  private constructor(x: XConnection, atoms: Atoms, log: Logger, onCopied: (text: string) => void) {
    this.#x = x;
    this.#atoms = atoms;
    this.#log = log;
    this.#onCopied = onCopied;
    const { client, root, fixes } = x;
    // An unmapped input-only window: owner of the selections, and the property that receives them.
    this.#window = client.AllocID();
    client.CreateWindow(this.#window, root, -1, -1, 1, 1, 0, 0, INPUT_ONLY, 0, {});
    fixes.SelectSelectionInput(this.#window, atoms.CLIPBOARD, fixes.SelectionEventMask.SetSelectionOwner);
    client.on('event', this.#onEvent);
  }

  /** `onCopied` gets the text of every copy in the display (CLIPBOARD), at most CLIPBOARD_MAX_BYTES. */
  static async create(x: XConnection, log: Logger, onCopied: (text: string) => void): Promise<X11Clipboard> {
    const names = ['CLIPBOARD', 'UTF8_STRING', 'TEXT', 'TARGETS', 'INCR', 'SVC_CLIPBOARD'] as const;
    const values = await Promise.all(names.map((name) => new Promise<number>((resolve, reject) => {
      x.client.InternAtom(false, name, (error, atom) => (error ? reject(error) : resolve(atom)));
    })));
    return new X11Clipboard(x, Object.fromEntries(names.map((name, i) => [name, values[i]])) as Atoms, log, onCopied);
  }

  /** The browser's clipboard text becomes the display's CLIPBOARD and PRIMARY. */
  set(text: string): void {
    this.#text = Buffer.from(text);
    for (const selection of [this.#atoms.CLIPBOARD, PRIMARY]) this.#x.client.SetSelectionOwner(this.#window, selection, CURRENT_TIME);
  }

  close(): void {
    this.#x.client.removeListener('event', this.#onEvent);
  }

  #onEvent = (event: XEvent): void => {
    if (event.name === 'SelectionRequest' && event.type === SELECTION_REQUEST && event.owner === this.#window) this.#answer(event);
    else if (event.name === 'SelectionNotify' && event.type === SELECTION_NOTIFY && event.requestor === this.#window) this.#receive(Number(event.property));
    else if (event.name === 'SelectionNotify' && event.type !== SELECTION_NOTIFY) this.#ownerChanged(event); // XFIXES' event of that name
  };

  /** Someone asks for the selection the app owns: put it on their property and tell them (ICCCM 2.2). */
  #answer(request: XEvent): void {
    const { client } = this.#x;
    const { TARGETS, UTF8_STRING, TEXT } = this.#atoms;
    const requestor = Number(request.requestor);
    const target = Number(request.target);
    const property = Number(request.property) || target; // property None: an obsolete client
    let answered = true;
    if (target === TARGETS) client.ChangeProperty(0, requestor, property, ATOM, 32, [TARGETS, UTF8_STRING, TEXT, STRING]);
    else if (target === UTF8_STRING || target === TEXT) client.ChangeProperty(0, requestor, property, UTF8_STRING, 8, this.#text);
    else if (target === STRING) client.ChangeProperty(0, requestor, property, STRING, 8, latin1(this.#text));
    else answered = false;
    client.SendEvent(requestor, false, 0, {
      name: 'SelectionNotify', time: Number(request.time), requestor, selection: Number(request.selection), target, property: answered ? property : 0,
    });
  }

  /** A new owner of CLIPBOARD (something was copied): ask it for UTF-8 text. */
  #ownerChanged(event: XEvent): void {
    const owner = Number(event.owner);
    if (owner === 0 || owner === this.#window) return;
    this.#x.client.ConvertSelection(this.#window, this.#atoms.CLIPBOARD, this.#atoms.UTF8_STRING, this.#atoms.SVC_CLIPBOARD, Number(event.selectionTimestamp));
  }

  #receive(property: number): void {
    if (property === 0) return; // the owner had no text
    const { client } = this.#x;
    client.GetProperty(1, this.#window, property, 0, 0, CLIPBOARD_MAX_BYTES / 4 + 1, (error, value) => {
      if (error) {
        this.#log.debug({ err: error }, 'clipboard not read');
        return;
      }
      if (value.type === this.#atoms.INCR || value.bytesAfter > 0 || value.data.length > CLIPBOARD_MAX_BYTES) {
        client.DeleteProperty(this.#window, property);
        this.#log.info({ maxBytes: CLIPBOARD_MAX_BYTES }, 'clipboard text copied in the app is too large for the browser; not sent');
        return;
      }
      this.#onCopied(value.data.toString(value.type === STRING ? 'latin1' : 'utf8'));
    });
  }
}

/** STRING is ISO Latin-1: characters beyond it become "?". */
function latin1(utf8: Buffer): Buffer {
  return Buffer.from(utf8.toString().replace(/[^\x00-\xff]/gu, '?'), 'latin1');
}
