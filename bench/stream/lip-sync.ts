// Lip-sync for bench/stream: how far apart the browser shows a picture and plays the sound that the app
// made at the same instant. The app (flash-and-tone.ts, an X11 app in the container, with its sound)
// turns the screen white and starts a tone together, and reports how far apart its own two instants were.
// In headless Chromium, with the real client page:
//   picture: requestVideoFrameCallback on every frame, the first frame whose picture is white, at its
//            presentationTime (handed to the compositor);
//   sound:   Chromium plays the page's audio into a PulseAudio server of the bench's own (the listener's
//            speaker), whose output `parec` records with a 2 ms buffer: the first loud sample after
//            silence, at the time it left Chromium's audio output.
// offset = sound - picture - (the app's tone - its flash): positive when the sound comes late. All times
// are this machine's wall clock.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { PulseServer } from '../../streaming-app/src/audio.ts';
import { CHROMIUM_ARGS, startApp, type AppLog } from '../../streaming-app/test/helpers.ts';

const APP = new URL('flash-and-tone.ts', import.meta.url).pathname;
const RATE = 48_000;
/** parec's buffer: a sample leaves it this long after Chromium's output wrote it, at most. */
const RECORD_LATENCY_MS = 2;

/** In the client page: the first frame of each flash, in wall-clock ms, into window.flashes. */
const WATCH_PICTURE = `(() => {
  const video = document.querySelector('video');
  const canvas = Object.assign(document.createElement('canvas'), { width: 4, height: 4 });
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  const flashes = window.flashes = [];
  let white = false;
  const step = (_now, frame) => {
    // A quarter into the picture: away from the X cursor in its middle.
    ctx.drawImage(video, video.videoWidth / 4, video.videoHeight / 4, 4, 4, 0, 0, 4, 4);
    const now = ctx.getImageData(0, 0, 1, 1).data[0] > 128;
    if (now && !white) flashes.push(performance.timeOrigin + frame.presentationTime);
    white = now;
    video.requestVideoFrameCallback(step);
  };
  video.requestVideoFrameCallback(step);
})()`;

/** Chromium's speaker: a PulseAudio server, and the onsets (wall-clock ms) of what is played into it. */
async function speaker() {
  const server = await PulseServer.start('pulseaudio');
  const recorder = spawn('parec', ['--raw', '--format=s16le', `--rate=${RATE}`, '--channels=1', `--latency-msec=${RECORD_LATENCY_MS}`, '-d', 'svc.monitor'],
    { env: { ...process.env, ...server.appEnv }, stdio: ['ignore', 'pipe', 'inherit'] });
  const onsets: number[] = [];
  let quiet = 0;
  recorder.stdout.on('data', (chunk: Buffer) => {
    const arrived = performance.timeOrigin + performance.now() - RECORD_LATENCY_MS;
    const samples = chunk.length >> 1;
    for (let i = 0; i < samples; i++) {
      if (Math.abs(chunk.readInt16LE(i * 2)) < 2000) {
        quiet++;
        continue;
      }
      if (quiet > RATE / 10) onsets.push(arrived - ((samples - i) * 1000) / RATE);
      quiet = 0;
    }
  });
  return {
    env: server.appEnv,
    onsets,
    async stop() {
      recorder.kill();
      await server.stop();
    },
  };
}

type Report = { flash: { at: number; doneAt: number }; toneAt?: number };
export type LipSync = { offsets: number[]; appSkew: number[]; audioJitterBufferMs: number; videoJitterBufferMs: number };

/** One session of `flashes` flashes on a fresh container, in a Chromium of its own that plays sound. */
export async function lipSyncSession(env: Record<string, string>, flashes: number): Promise<LipSync> {
  const sound = await speaker();
  const profile = await mkdtemp(join(tmpdir(), 'svc-bench-lip-sync-'));
  const app = await startApp({ ...env, STREAMING_SOURCE: 'x11', STREAMING_AUDIO: 'true', LOG_LEVEL: 'debug', STREAMING_APP_COMMAND: `exec ${process.execPath} ${APP}` });
  // Playwright mutes headless Chromium by default; this one plays into the bench's speaker.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', args: [...CHROMIUM_ARGS, '--autoplay-policy=no-user-gesture-required'], ignoreDefaultArgs: ['--mute-audio'],
    headless: true, env: { ...process.env, ...sound.env },
  });
  try {
    const page = await context.newPage();
    await page.goto(`http://127.0.0.1:${app.streamingPort}/client/?autostart=1&signal=${encodeURIComponent(app.signalingUrl())}`);
    await page.waitForFunction('svcStream.meter.framesPresented > 0', undefined, { timeout: 20_000 });
    await page.evaluate(WATCH_PICTURE);
    // The app's own report of each flash, through the container's log of its output.
    const reports = (): Report[] => app.logs.filter((log: AppLog) => log.msg === 'app output' && String(log.line).startsWith('{'))
      .map((log) => JSON.parse(String(log.line)) as Report);
    const from = reports().length + 1; // the flash under way may have begun before the page watched
    while (reports().length < from + flashes) await new Promise((resolve) => setTimeout(resolve, 200));
    const pictures = await page.evaluate('window.flashes') as number[];
    const stats = await page.evaluate(`svcStream.client.peerConnection.getStats().then((report) => {
      const delay = {};
      report.forEach((s) => { if (s.type === 'inbound-rtp') delay[s.kind] = 1000 * s.jitterBufferDelay / s.jitterBufferEmittedCount; });
      return delay;
    })`) as { audio: number; video: number };
    await page.evaluate('svcStream.bye("bench")');
    const result: LipSync = { offsets: [], appSkew: [], audioJitterBufferMs: stats.audio, videoJitterBufferMs: stats.video };
    for (const { flash, toneAt } of reports().slice(from, from + flashes)) {
      const picture = pictures.find((at) => at > flash.at && at < flash.at + 500);
      const heard = sound.onsets.find((at) => at > flash.at && at < flash.at + 500);
      if (toneAt === undefined || picture === undefined || heard === undefined) continue;
      result.appSkew.push(toneAt - flash.at);
      result.offsets.push(heard - picture - (toneAt - flash.at));
    }
    return result;
  } finally {
    await context.close();
    await app.stop();
    await sound.stop();
    await rm(profile, { recursive: true, force: true });
  }
}
