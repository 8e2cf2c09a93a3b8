// The application svc streams in bench/stream/network.ts: a pipe-source renderer that draws, into each
// frame it writes, the newest input it has read from the app (the frame barcode: frame number and input
// sequence, client/barcode.ts). Its pictures come from ffmpeg (testsrc2 with fresh noise in every frame, at
// STREAMING_VIDEO_FPS); its input comes over STREAMING_FRAME_PIPE, as a real application's does. That is
// what the libwebrtc sender page does with its canvas, so both sides of the bench measure input-to-photon
// from an application that shows an input in the first frame it draws after reading it.
//   STREAMING_APP_COMMAND='exec node bench/stream/input-renderer.ts' (the app sets the variables below)
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { barcodeStamper } from '../../streaming-app/src/frame-source.ts';

const width = Number(process.env.STREAMING_VIDEO_WIDTH);
const height = Number(process.env.STREAMING_VIDEO_HEIGHT);
const fps = Number(process.env.STREAMING_VIDEO_FPS);
const frameBytes = (width * height * 3) / 2;
const stamp = barcodeStamper(width, height);

const pictures = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-re', '-f', 'lavfi',
  '-i', `testsrc2=size=${width}x${height}:rate=${fps},noise=alls=12:allf=t`, '-pix_fmt', 'yuv420p', '-f', 'rawvideo', 'pipe:1'],
{ stdio: ['ignore', 'pipe', 'inherit'] });
const socket = connect(process.env.STREAMING_FRAME_PIPE ?? '');

let newestInput = 0;
createInterface({ input: socket }).on('line', (line) => {
  const seq: unknown = (JSON.parse(line) as { seq?: unknown }).seq;
  if (typeof seq === 'number' && seq > newestInput) newestInput = seq;
});

let frameNumber = 0;
let frame = Buffer.alloc(frameBytes);
let filled = 0;
pictures.stdout.on('data', (chunk: Buffer) => {
  for (let offset = 0; offset < chunk.length;) {
    const take = Math.min(frameBytes - filled, chunk.length - offset);
    chunk.copy(frame, filled, offset, offset + take);
    filled += take;
    offset += take;
    if (filled < frameBytes) continue;
    filled = 0;
    // A frame the app has not taken yet is not queued behind: this one is dropped, as a renderer drawing
    // at the display's rate drops a frame its compositor has no room for (queued frames are latency).
    if (socket.writableLength > 0) continue;
    stamp(frame, ++frameNumber, newestInput);
    socket.write(frame);
    frame = Buffer.alloc(frameBytes); // the socket may still hold the last one
  }
});

const end = (): void => {
  pictures.kill();
  process.exit(0);
};
socket.on('close', end);
socket.on('error', end);
pictures.on('exit', end);
