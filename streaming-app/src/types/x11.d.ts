// The part of the `x11` package (a pure JavaScript X11 protocol client, no types of its own) that the
// streaming app uses: a connection, a few core requests, and the XTEST extension.
declare module 'x11' {
  type Callback<T> = (error: Error | null, value: T) => void;

  export interface XTest {
    KeyPress: number;
    KeyRelease: number;
    ButtonPress: number;
    ButtonRelease: number;
    MotionNotify: number;
    /** For MotionNotify, `detail` 1 makes x/y relative. */
    FakeInput(type: number, detail: number, time: number, window: number, x: number, y: number): void;
  }

  export interface XClient {
    require(extension: 'xtest', callback: Callback<XTest>): void;
    QueryTree(window: number, callback: Callback<{ children: number[] }>): void;
    GetWindowAttributes(window: number, callback: Callback<{ mapState: number }>): void;
    GetKeyboardMapping(first: number, count: number, callback: Callback<number[][]>): void;
    ChangeKeyboardMapping(first: number, keysymsPerKeycode: number, keysyms: number[]): void;
    GetInputFocus(callback: Callback<unknown>): void;
    QueryPointer(window: number, callback: Callback<{ rootX: number; rootY: number; keyMask: number }>): void;
    on(event: 'error' | 'end', listener: (error?: Error) => void): void;
    terminate(): void;
  }

  export interface XDisplay {
    client: XClient;
    min_keycode: number;
    max_keycode: number;
    screen: { root: number; pixel_width: number; pixel_height: number }[];
  }

  export function createClient(options: { display: string }, callback: Callback<XDisplay>): void;
  const x11: { createClient: typeof createClient };
  export default x11;
}
