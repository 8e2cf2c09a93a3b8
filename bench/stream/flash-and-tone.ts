// The application of bench/stream's lip-sync row, run by the container as STREAMING_APP_COMMAND: a window
// over the whole screen, black and silent, that turns white while a 1 kHz tone plays, for 200 ms every
// 700-1000 ms. Each flash it writes the tone to `pacat` (PulseAudio's client, low latency) and fills the
// window white at once; PulseAudio says when the tone actually began to play ("Stream started": the
// stream runs dry between tones and starts again). Both instants go to stdout as one JSON line per flash,
// in wall-clock ms, so the bench can take this app's own offset out of what the browser measures.
import { spawn } from 'node:child_process';
import x11, { type XDisplay } from 'x11';

const TONE_MS = 200;
const RATE = 48_000;
const INPUT_OUTPUT = 1;
const [WHITE, BLACK] = [0xffffff, 0];

const wallMs = (): number => performance.timeOrigin + performance.now();
const display = await new Promise<XDisplay>((resolve, reject) => x11.createClient({ display: process.env.DISPLAY ?? '' }, (error, value) => (error ? reject(error) : resolve(value))));
const { client } = display;
const { root, pixel_width: width, pixel_height: height } = display.screen[0];
const window = client.AllocID();
client.CreateWindow(window, root, 0, 0, width, height, 0, 0, INPUT_OUTPUT, 0, { backgroundPixel: BLACK });
client.MapWindow(window);
const gc = client.AllocID();
client.CreateGC(gc, window, { foreground: BLACK });
/** Fills the window; resolves once the X server has done it (a round trip after the request). */
const fill = (colour: number): Promise<unknown> => {
  client.ChangeGC(gc, { foreground: colour });
  client.PolyFillRectangle(window, gc, [0, 0, width, height]);
  return new Promise((resolve) => client.GetInputFocus(resolve));
};

// s16le mono; a few ms of buffer so the tone starts within a few ms of being written.
const pacat = spawn('pacat', ['--playback', '--verbose', '--raw', '--format=s16le', `--rate=${RATE}`, '--channels=1', '--latency-msec=5', '--stream-name=tone'],
  { stdio: ['pipe', 'ignore', 'pipe'] });
let toneStarted: ((at: number) => void) | undefined;
pacat.stderr.on('data', (chunk: Buffer) => {
  if (chunk.includes('Stream started')) toneStarted?.(wallMs());
});
pacat.on('exit', (code) => {
  process.stderr.write(`pacat exited (${code}): is PulseAudio's client installed (Debian package pulseaudio-utils)?\n`);
  process.exit(1);
});
const tone = Buffer.alloc((RATE * TONE_MS / 1000) * 2);
for (let i = 0; i < tone.length / 2; i++) tone.writeInt16LE(Math.round(12_000 * Math.sin((2 * Math.PI * 1000 * i) / RATE)), i * 2);

await fill(BLACK);
for (;;) {
  await new Promise((resolve) => setTimeout(resolve, 700 + Math.random() * 300));
  const started = new Promise<number>((resolve) => { toneStarted = resolve; });
  pacat.stdin.write(tone);
  const flashAt = wallMs();
  await fill(WHITE);
  const flashDoneAt = wallMs();
  const toneAt = await Promise.race([started, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), TONE_MS))]);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, flashAt + TONE_MS - wallMs())));
  await fill(BLACK);
  process.stdout.write(`${JSON.stringify({ flash: { at: flashAt, doneAt: flashDoneAt }, toneAt })}\n`);
}
