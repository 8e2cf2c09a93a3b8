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
} as const;

/** Close codes after which reconnecting is pointless. */
export const FINAL_CLOSE_CODES: readonly number[] = [
  CloseCode.normal, CloseCode.protocolError, CloseCode.badResumeToken, CloseCode.busy, CloseCode.sessionOver,
  CloseCode.replaced, CloseCode.internalError,
];

/** DataChannel "input", browser to app. `seq` increases by one per event; `t` is the sender's clock (ms). */
export type InputMessage =
  | { type: 'pointer'; seq: number; t: number; x: number; y: number }
  | { type: 'key'; seq: number; t: number; key: string };

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
};

export const INPUT_CHANNEL_LABEL = 'input';
