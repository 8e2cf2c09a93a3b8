// Entry point of the browser client: the page people see. Query parameters:
//   signal=<url>   signaling WebSocket (ws:, wss:, http(s): or relative to this page; default ../sign_in)
//   relay=1        use only TURN-relayed paths (iceTransportPolicy "relay")
//   autostart=1    start at once instead of showing the Start button (scripts, kiosks, embedding)
//   stats=1        show the statistics overlay and the frame barcode (F8 toggles them)
// The page: a start screen (the app's name, a Start button: the click is also what lets sound play),
// its place in line while every instance is busy, the stream with Stop / Fullscreen / Lock pointer,
// and one message per way a session ends, with what to do. Leaving the page ends the session.
// `window.svcStream` exposes the pieces for scripted use (tests, benchmarks).
import { shownBarcodeLayout } from './barcode.ts';
import { FrameMeter } from './frame-meter.ts';
import { InputCapture } from './input-capture.ts';
import { StatsOverlay } from './stats-overlay.ts';
import { StreamClient, type EndCause, type PlaceInLine } from './stream-client.ts';

type PageState = 'start' | 'connecting' | 'waiting' | 'streaming' | 'ended';

function signalingUrl(params: URLSearchParams): string {
  const url = new URL(params.get('signal') ?? '../sign_in', location.href);
  if (url.protocol === 'http:') url.protocol = 'ws:';
  if (url.protocol === 'https:') url.protocol = 'wss:';
  return url.toString();
}

/** What each ending says, and what the one button then does. */
const ENDINGS: Record<EndCause, { message: string; hint: string; action: 'start' | 'reload' }> = {
  left: { message: 'You ended the session.', hint: 'Start a new one whenever you like.', action: 'start' },
  'app-ended': { message: 'The app ended the session.', hint: 'Start a new one whenever you like.', action: 'start' },
  lost: { message: 'The connection to the app was lost and could not be resumed.', hint: 'Start a new session.', action: 'start' },
  'sign-in': { message: 'Your sign-in is missing or has expired.', hint: 'Sign in again, then reload this page.', action: 'reload' },
  forbidden: { message: 'Your account is not allowed to use this app.', hint: 'Ask the app\'s owner for access.', action: 'reload' },
  'not-found': { message: 'This app is not available right now.', hint: 'It is not deployed at the moment; try again later or ask its owner.', action: 'start' },
  busy: { message: 'The app is too busy to take you now.', hint: 'Every instance is in use and the line is full, or the wait ran out. Try again in a few minutes.', action: 'start' },
  unreachable: { message: 'The streaming service cannot be reached.', hint: 'Check your connection, then try again.', action: 'start' },
};

const params = new URLSearchParams(location.search);
const signalUrl = signalingUrl(params);
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const video = $<HTMLVideoElement>('video');
const overlayElement = $('overlay');
const [message, hint, detail, place] = [$('message'), $('hint'), $('detail'), $('place')];
const [action, leave] = [$<HTMLButtonElement>('action'), $<HTMLButtonElement>('leave')];

const meter = new FrameMeter(video);
const overlay = new StatsOverlay(overlayElement, meter);
const input = new InputCapture(video);
// The app's sound plays here; browsers allow it after a user gesture on the page (its start button).
const audio = new Audio();
audio.autoplay = true;
input.onSent = (seq, at) => meter.inputSent(seq, at);
let client: StreamClient | undefined;
let state: PageState = 'start';
let ended: string | undefined;
let endCause: EndCause | undefined;
let lastPlace: PlaceInLine | undefined;
let statsShown = false;

/** The page in one state: what happened, what to do, and (small) the technical reason. */
function show(next: PageState, text = '', toDo = '', why = '') {
  state = next;
  document.body.dataset.state = next;
  message.textContent = text;
  hint.textContent = toDo;
  detail.textContent = why;
  action.hidden = next === 'connecting' || next === 'waiting';
  leave.hidden = next !== 'waiting';
}

function waiting(where: PlaceInLine) {
  lastPlace = where;
  place.textContent = `#${where.position}`;
  const minutes = where.estimatedWaitSeconds === undefined ? undefined : Math.max(1, Math.round(where.estimatedWaitSeconds / 60));
  show('waiting', `Every instance is busy. You are #${where.position} in line${minutes ? `, about ${minutes} min` : ''}.`,
    'The stream starts by itself when an instance frees up; keep this tab open.');
}

/** What the page waits for after a client status, in words a person can act on (or at least follow). */
function waitingFor(status: string): string {
  if (status.startsWith('connecting') || status.startsWith('reconnecting')) return 'the streaming server';
  if (status === 'negotiating…' || status === 'resumed' || status === 'peer new' || status === 'peer connecting') return 'the media connection (ICE, DTLS)';
  if (status === 'peer connected') return 'the first video frame';
  return status;
}

function start() {
  if (state === 'connecting' || state === 'waiting' || state === 'streaming') return;
  ended = undefined;
  endCause = undefined;
  // The click that started the session also lets the app's sound play.
  video.muted = params.get('autostart') === '1' && !navigator.userActivation?.hasBeenActive;
  show('connecting', 'Starting…');
  client = new StreamClient({
    signalUrl,
    relayOnly: params.get('relay') === '1',
    onConnecting: (resuming) => { if (!resuming) meter.connecting(); },
    onConfig: (config) => { meter.sourceWidth = config.video.width; },
    onWaiting: waiting,
    onVideo: (stream) => {
      video.srcObject = stream;
      void video.play().catch(() => { /* a muted video may always play; nothing else to do */ });
      meter.start();
      overlay.watch(client?.peerConnection);
      // "Streaming" only once a picture is shown: until then the page says what it is waiting for.
      show('connecting', 'Connected, waiting for the first picture…', '', 'Waiting for the first video frame');
      const shown = () => {
        if (state !== 'connecting' || video.srcObject !== stream) return;
        show('streaming');
        // Typing reaches the app at once, without a click into the picture first.
        video.focus();
      };
      video.requestVideoFrameCallback(shown);
    },
    onStatus: (status) => {
      overlay.status = status;
      if (state === 'connecting') detail.textContent = `Waiting for ${waitingFor(status)}`;
      void overlay.refresh();
    },
    onAudio: (stream) => {
      audio.srcObject = stream;
      void audio.play().catch(() => { /* blocked until the user interacts with the page */ });
    },
    onAppStats: (stats) => { overlay.appStats = stats; },
    onInputChannel: (channel) => input.setChannel(channel),
    onEnded: (reason, cause) => {
      ended = reason;
      endCause = cause;
      input.exitRelativeMode();
      const ending = ENDINGS[cause];
      show('ended', ending.message, ending.hint, cause === 'left' ? '' : `Details: ${reason}`);
      action.textContent = ending.action === 'reload' ? 'Reload' : cause === 'left' || cause === 'app-ended' ? 'Start again' : 'Try again';
    },
  });
  client.connect();
}

/** Whether one can start now, and if not why: everyone's instance is busy, people wait, or none is up yet. */
function startText(about: { instances?: number; free?: number; waiting?: number }): string {
  if (about.free) return 'Ready to start.';
  if (about.waiting) return `${about.waiting} ${about.waiting === 1 ? 'person is' : 'people are'} waiting for an instance.`;
  if (about.instances) return `${about.instances === 1 ? 'The instance is' : `All ${about.instances} instances are`} in use; press Start to wait in line.`;
  return 'An instance is being prepared.';
}

/** The start screen names the app and says whether it is free now (the platform's GET sign-in). */
async function describe() {
  const url = new URL(signalUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  const response = await fetch(url, { headers: { 'x-svc-absorb': 'true' }, credentials: 'include' }).catch(() => undefined);
  const about = response?.ok ? await response.json().catch(() => undefined) as { name?: string; description?: string; instances?: number; free?: number; waiting?: number } | undefined : undefined;
  if (!about?.name) return;
  $('app-name').textContent = about.name;
  $('app-description').textContent = about.description ?? '';
  document.title = about.name;
  if (state === 'start') {
    message.textContent = startText(about);
  }
}

// Statistics and the frame barcode, only when asked for.
function setStats(visible: boolean) {
  statsShown = visible;
  overlayElement.hidden = !visible;
  maskBarcode();
}

/** The app's frame barcode (the top strip of its test scene) is clipped away unless statistics are shown. */
function maskBarcode() {
  const { videoWidth: width, videoHeight: height } = video;
  if (statsShown || !width || meter.framesDecodedFromBarcode === 0) {
    video.style.clipPath = '';
    return;
  }
  const box = video.getBoundingClientRect();
  const scale = Math.min(box.width / width, box.height / height);
  const top = (box.height - height * scale) / 2 + shownBarcodeLayout(meter.sourceWidth ?? width, width).height * scale;
  video.style.clipPath = `inset(${Math.ceil(top)}px 0 0 0)`;
}

action.addEventListener('click', () => (endCause && ENDINGS[endCause].action === 'reload' ? location.reload() : start()));
leave.addEventListener('click', () => client?.bye('left the line'));
$('stop').addEventListener('click', () => client?.bye('stopped'));
$('fullscreen').addEventListener('click', () => void (document.fullscreenElement ? document.exitFullscreen() : document.documentElement.requestFullscreen()));
// Relative pointer input for games and 3D viewers: the pointer is locked and moves are sent as deltas.
$('lock').addEventListener('click', () => void input.enterRelativeMode());
$('stats').addEventListener('click', () => setStats(!statsShown));
window.addEventListener('keydown', (event) => {
  if (event.key !== 'F8') return;
  event.preventDefault();
  event.stopImmediatePropagation();
  setStats(!statsShown);
}, { capture: true });
window.addEventListener('resize', maskBarcode);
video.addEventListener('resize', maskBarcode);
setInterval(maskBarcode, 1000);
// Leaving the page (closing the tab, navigating, reloading) ends the session: the instance goes to the
// next person at once instead of waiting out the resume window.
window.addEventListener('pagehide', () => client?.bye('page closed'));

const api = {
  get client() { return client; }, meter, overlay, input, audio,
  get ended() { return ended; },
  get state() { return state; },
  get place() { return lastPlace; },
  start,
  sendPointer: (x: number, y: number) => input.sendPointer(x, y),
  sendKey: (key: string) => input.sendKey(key),
  sendKeyCode: (code: string, key: string, down: boolean, mods?: number) => input.sendKeyCode(code, key, down, mods),
  sendButton: (button: number, down: boolean) => input.sendButton(button, down),
  sendWheel: (dx: number, dy: number) => input.sendWheel(dx, dy),
  sendMove: (dx: number, dy: number) => input.sendMove(dx, dy),
  sendText: (text: string) => input.sendText(text),
  bye: (reason?: string) => client?.bye(reason),
  dropSocket: () => client?.dropSocket(),
  /** The video receiver's own counters (inbound-rtp), for link tests and benchmarks. */
  async receiverStats() {
    const report = await client?.peerConnection?.getStats();
    let video: Record<string, any> | undefined;
    report?.forEach((s: Record<string, any>) => { if (s.type === 'inbound-rtp' && s.kind === 'video') video = s; });
    if (!video) return undefined;
    const { framesDecoded, framesDropped, freezeCount, totalFreezesDuration, pliCount, nackCount, packetsLost, packetsReceived, bytesReceived,
      keyFramesDecoded, frameWidth, frameHeight, jitterBufferDelay, jitterBufferEmittedCount, fecPacketsReceived, fecPacketsDiscarded, fecBytesReceived,
      retransmittedPacketsReceived } = video;
    return { framesDecoded, framesDropped, freezeCount, totalFreezesDuration, pliCount, nackCount, packetsLost, packetsReceived, bytesReceived,
      keyFramesDecoded, frameWidth, frameHeight, jitterBufferDelay, jitterBufferEmittedCount, fecPacketsReceived, fecPacketsDiscarded, fecBytesReceived,
      retransmittedPacketsReceived };
  },
  async snapshot() {
    const timeline = Object.fromEntries(Object.entries(client?.timeline ?? {}).map(([k, v]) => [k, Math.round(v - (client?.timeline.connect ?? 0))]));
    return { ...meter.snapshot(), metrics: { ...(await overlay.refresh()) }, timeline, inputReady: input.ready, ended, state, status: overlay.status };
  },
};
(globalThis as unknown as { svcStream: typeof api }).svcStream = api;

setStats(params.get('stats') === '1');
void describe();
if (params.get('autostart') === '1') start();
