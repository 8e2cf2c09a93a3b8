// The part of the `x11` package (a pure JavaScript X11 protocol client, no types of its own) that the
// streaming app uses: a connection, a few core requests, and the XTEST, DAMAGE, XFIXES and MIT-SHM
// extensions.
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

  export interface XDamage {
    ReportLevel: { RawRectangles: number; DeltaRectangles: number; BoundingBox: number; NonEmpty: number };
    Create(damage: number, drawable: number, reportLevel: number): void;
    Destroy(damage: number): void;
    /** With repair 0 (None): the whole damage region is repaired (emptied), copied to region `parts` first unless 0. */
    Subtract(damage: number, repair: number, parts: number): void;
  }

  export type Rect = { x: number; y: number; width: number; height: number };

  export type CursorImage = { x: number; y: number; width: number; height: number; xhot: number; yhot: number; cursorSerial: number; cursorImage: Buffer };

  export interface XFixes {
    CursorNotifyMask: { DisplayCursor: number };
    SelectionEventMask: { SetSelectionOwner: number; SelectionWindowDestroy: number; SelectionClientClose: number };
    SelectCursorInput(window: number, eventMask: number): void;
    CreateRegion(region: number, rectangles: Rect[]): void;
    DestroyRegion(region: number): void;
    FetchRegion(region: number, callback: Callback<{ extents: Rect; rectangles: Rect[] }>): void;
    SelectSelectionInput(window: number, selection: number, eventMask: number): void;
    GetCursorImage(callback: Callback<CursorImage>): void;
  }

  export interface XShm {
    /** True when the connection can pass a file descriptor (a local unix socket). */
    fdCapable: boolean;
    major: number;
    minor: number;
    /** MIT-SHM 1.2: the server maps `fd` (a /dev/shm file) as segment `shmseg`. */
    AttachFd(shmseg: number, fd: number, readOnly: boolean, callback: (error: Error | null) => void): void;
    Detach(shmseg: number, callback?: () => void): void;
    GetImage(drawable: number, x: number, y: number, width: number, height: number, planeMask: number, format: number,
      shmseg: number, offset: number, callback: Callback<{ depth: number; visual: number; size: number }>): void;
  }

  /** Core events and extension events alike; fields depend on `name`. */
  export type XEvent = { name: string; [field: string]: unknown };

  export interface XClient {
    require(extension: 'xtest', callback: Callback<XTest>): void;
    require(extension: 'damage', callback: Callback<XDamage>): void;
    require(extension: 'fixes', callback: Callback<XFixes>): void;
    require(extension: 'shm', callback: Callback<XShm>): void;
    AllocID(): number;
    QueryTree(window: number, callback: Callback<{ children: number[] }>): void;
    GetWindowAttributes(window: number, callback: Callback<{ mapState: number }>): void;
    GetKeyboardMapping(first: number, count: number, callback: Callback<number[][]>): void;
    ChangeKeyboardMapping(first: number, keysymsPerKeycode: number, keysyms: number[]): void;
    GetInputFocus(callback: Callback<unknown>): void;
    /** revertTo: 0 None, 1 PointerRoot, 2 Parent. */
    SetInputFocus(window: number, revertTo: number): void;
    QueryPointer(window: number, callback: Callback<{ rootX: number; rootY: number; keyMask: number }>): void;
    /** class 1: InputOutput, 2: InputOnly (depth and visual 0: the parent's). */
    CreateWindow(id: number, parent: number, x: number, y: number, width: number, height: number, borderWidth: number,
      depth: number, windowClass: number, visual: number, values: { backgroundPixel?: number }): void;
    MapWindow(window: number): void;
    InternAtom(onlyIfExists: boolean, name: string, callback: Callback<number>): void;
    SetSelectionOwner(owner: number, selection: number, time: number): void;
    ConvertSelection(requestor: number, selection: number, target: number, property: number, time: number): void;
    /** mode 0: replace; format 8, 16 or 32 bits per element. */
    ChangeProperty(mode: number, window: number, property: number, type: number, format: number, data: Buffer | number[]): void;
    GetProperty(remove: number, window: number, property: number, type: number, longOffset: number, longLength: number,
      callback: Callback<{ type: number; format: number; bytesAfter: number; data: Buffer }>): void;
    DeleteProperty(window: number, property: number): void;
    /** `event` is packed from its fields and `name`. */
    SendEvent(destination: number, propagate: boolean, eventMask: number, event: XEvent): void;
    CreateGC(gc: number, drawable: number, values: { foreground?: number }): void;
    ChangeGC(gc: number, values: { foreground?: number }): void;
    PolyFillRectangle(drawable: number, gc: number, rectangles: number[]): void;
    GetImage(format: number, drawable: number, x: number, y: number, width: number, height: number, planeMask: number,
      callback: Callback<{ depth: number; visualId: number; data: Buffer }>): void;
    on(event: 'error' | 'end', listener: (error?: Error) => void): void;
    on(event: 'event', listener: (event: XEvent) => void): void;
    removeListener(event: 'event', listener: (event: XEvent) => void): void;
    terminate(): void;
  }

  export interface XDisplay {
    client: XClient;
    min_keycode: number;
    max_keycode: number;
    /** 0: least significant byte first. */
    image_byte_order: number;
    /** Pixmap formats by depth. */
    format: Record<number, { bits_per_pixel: number }>;
    screen: { root: number; root_depth: number; pixel_width: number; pixel_height: number }[];
  }

  export function createClient(options: { display: string }, callback: Callback<XDisplay>): void;
  const x11: { createClient: typeof createClient };
  export default x11;
}
