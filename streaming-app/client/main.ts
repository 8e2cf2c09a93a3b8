// Entry point of the browser client. Query parameters:
//   signal=<url>  signaling WebSocket (ws:, wss:, http(s): or relative to this page; default ../sign_in)
//   relay=1       use only TURN-relayed paths (iceTransportPolicy "relay")
//   overlay=0     hide the statistics overlay
// `window.svcStream` exposes the pieces for scripted use (tests, benchmarks).
import { FrameMeter } from './frame-meter.ts';
import { InputCapture } from './input-capture.ts';
import { StatsOverlay } from './stats-overlay.ts';
import { StreamClient } from './stream-client.ts';

function signalingUrl(params: URLSearchParams): string {
  const url = new URL(params.get('signal') ?? '../sign_in', location.href);
  if (url.protocol === 'http:') url.protocol = 'ws:';
  if (url.protocol === 'https:') url.protocol = 'wss:';
  return url.toString();
}

const params = new URLSearchParams(location.search);
const video = document.getElementById('video') as HTMLVideoElement;
const overlayElement = document.getElementById('overlay') as HTMLElement;
overlayElement.hidden = params.get('overlay') === '0';

const meter = new FrameMeter(video);
const overlay = new StatsOverlay(overlayElement, meter);
const input = new InputCapture(video);
// The app's sound plays here; browsers allow it after a user gesture on the page (its start button).
const audio = new Audio();
audio.autoplay = true;
input.onSent = (seq, at) => meter.inputSent(seq, at);
let ended: string | undefined;

const client = new StreamClient({
  signalUrl: signalingUrl(params),
  relayOnly: params.get('relay') === '1',
  onConnecting: (resuming) => { if (!resuming) meter.connecting(); },
  onVideo: (stream) => {
    video.srcObject = stream;
    void video.play().catch(() => { /* autoplay of muted video is allowed; nothing to do */ });
    meter.start();
    overlay.watch(client.peerConnection);
  },
  onStatus: (status) => {
    overlay.status = status;
    void overlay.refresh();
  },
  onAudio: (stream) => {
    audio.srcObject = stream;
    void audio.play().catch(() => { /* blocked until the user interacts with the page */ });
  },
  onAppStats: (stats) => { overlay.appStats = stats; },
  onInputChannel: (channel) => input.setChannel(channel),
  onEnded: (reason) => { ended = reason; },
});

// Closing or reloading the tab is a drop, not a bye: a reload within the resume window continues the
// session (the resume token is kept in sessionStorage). The "bye" button of an app would call client.bye().

const api = {
  client, meter, overlay, input, audio,
  get ended() { return ended; },
  sendPointer: (x: number, y: number) => input.sendPointer(x, y),
  sendKey: (key: string) => input.sendKey(key),
  sendKeyCode: (code: string, key: string, down: boolean, mods?: number) => input.sendKeyCode(code, key, down, mods),
  sendButton: (button: number, down: boolean) => input.sendButton(button, down),
  sendWheel: (dx: number, dy: number) => input.sendWheel(dx, dy),
  sendMove: (dx: number, dy: number) => input.sendMove(dx, dy),
  sendText: (text: string) => input.sendText(text),
  bye: (reason?: string) => client.bye(reason),
  dropSocket: () => client.dropSocket(),
  async snapshot() {
    const timeline = Object.fromEntries(Object.entries(client.timeline).map(([k, v]) => [k, Math.round(v - (client.timeline.connect ?? 0))]));
    return { ...meter.snapshot(), metrics: { ...(await overlay.refresh()) }, timeline, inputReady: input.ready, ended, status: overlay.status };
  },
};
(globalThis as unknown as { svcStream: typeof api }).svcStream = api;

client.connect();
