// The signaling protocol spoken over the WebSocket, and the DataChannel messages. Types only (plus the
// close codes), shared by the app and the browser client; docs/streaming-protocol.md is the reference.

export const PROTOCOL_VERSION = 1;

export type IceCandidateJson = {
  candidate: string;
  sdpMid?: string | null;
  sdpMLineIndex?: number | null;
  usernameFragment?: string | null;
};

export type IceServerJson = { urls: string | string[]; username?: string; credential?: string };

export type VideoInfo = { codec: 'H264' | 'VP8'; encoder: string; width: number; height: number; fps: number; bitrateKbps: number };

/** Browser to app. */
export type ClientMessage =
  /** First message on every connection. Without resumeToken it starts the session and asks for ports. */
  | { type: 'hello'; protocol: number; resumeToken?: string; hasPeer?: boolean }
  | { type: 'answer'; sdp: string }
  /** A trickled candidate of the browser; null means end of candidates. */
  | { type: 'candidate'; candidate: IceCandidateJson | null }
  /** Ask for a fresh peer connection (the app answers with a new offer). */
  | { type: 'restart' }
  | { type: 'ping'; t: number }
  /** Ends the session at once. */
  | { type: 'bye'; reason?: string };

/** App to browser. */
export type ServerMessage =
  | {
    type: 'config';
    protocol: number;
    sessionId: string;
    resumeToken: string;
    resumed: boolean;
    iceServers: IceServerJson[];
    video: VideoInfo;
    keepaliveMs: number;
    resumeWindowMs: number;
  }
  /** Always for a new peer connection: the browser replaces any peer connection it has. */
  | { type: 'offer'; sdp: string }
  | { type: 'candidate'; candidate: IceCandidateJson | null }
  | { type: 'pong'; t: number }
  | { type: 'bye'; reason: string }
  | { type: 'error'; code: string; message: string };

/** WebSocket close codes used by the app (4xxx mirror HTTP statuses where one fits). */
export const CloseCode = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 4400,
  badResumeToken: 4401,
  keepaliveTimeout: 4408,
  busy: 4409,
  sessionOver: 4410,
  replaced: 4412,
  internalError: 4500,
  /** The streamed application exited (or crashed): the session cannot go on. */
  applicationExited: 4502,
} as const;

/** Close codes after which reconnecting is pointless. */
export const FINAL_CLOSE_CODES: readonly number[] = [
  CloseCode.normal, CloseCode.protocolError, CloseCode.badResumeToken, CloseCode.busy, CloseCode.sessionOver,
  CloseCode.replaced, CloseCode.internalError, CloseCode.applicationExited,
];

/** Modifier bits of `key` events (`mods`): the app brings its modifier state in line before the key. */
export const Modifier = { shift: 1, ctrl: 2, alt: 4, meta: 8 } as const;

/**
 * DataChannel "input", browser to app. `seq` increases by one per event; `t` is the sender's clock (ms).
 * Pointer positions are 0..1 across the picture; relative moves (pointer lock) are in video pixels.
 * Buttons are DOM numbers (0 left, 1 middle, 2 right, 3 back, 4 forward); wheel deltas are in pixels
 * (100 ≈ one notch); `code` is KeyboardEvent.code (the physical key), `key` KeyboardEvent.key.
 */
export type InputMessage =
  | { type: 'pointer'; seq: number; t: number; x: number; y: number }
  | { type: 'move'; seq: number; t: number; dx: number; dy: number }
  | { type: 'button'; seq: number; t: number; button: number; down: boolean }
  | { type: 'wheel'; seq: number; t: number; dx: number; dy: number }
  | { type: 'key'; seq: number; t: number; key: string; code?: string; down?: boolean; mods?: number }
  | { type: 'text'; seq: number; t: number; text: string }
  /** Puts text on the app's clipboard (the x11 source: CLIPBOARD and PRIMARY); at most CLIPBOARD_MAX_BYTES. */
  | { type: 'clipboard'; seq: number; t: number; text: string };

/** Clipboard text, either way, is at most this many bytes of UTF-8 (a message must fit SCTP's 64 KiB). */
export const CLIPBOARD_MAX_BYTES = 32 * 1024;

/** DataChannel "input", app to browser: the app's clipboard changed (the x11 source: something copied to CLIPBOARD). */
export type AppClipboardMessage = { type: 'clipboard'; text: string };

/** DataChannel "input", app to browser, about once a second. */
export type AppStatsMessage = {
  type: 'stats';
  encoder: string;
  frame: number;
  fps: number;
  kbps: number;
  encodeMsP50: number;
  encodeMsLast: number;
  keyframes: number;
  skipped: number;
  /** Input events the app dropped because a field was bad (the session goes on). */
  inputDropped: number;
};

export const INPUT_CHANNEL_LABEL = 'input';
