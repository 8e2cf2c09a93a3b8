// A renderer with no window, for the pipe source (and an example of one): it connects to the socket in
// STREAMING_FRAME_PIPE, writes I420 frames of STREAMING_VIDEO_WIDTH x STREAMING_VIDEO_HEIGHT at
// STREAMING_VIDEO_FPS (a bar sweeping down the picture), reads input events (one JSON line each) from the
// same socket, prints them, and brightens the picture with every key press.
import { connect } from 'node:net';
import { createInterface } from 'node:readline';

const width = Number(process.env.STREAMING_VIDEO_WIDTH);
const height = Number(process.env.STREAMING_VIDEO_HEIGHT);
const fps = Number(process.env.STREAMING_VIDEO_FPS);
const frame = Buffer.alloc((width * height * 3) / 2, 128);
let luma = 40;

const socket = connect(process.env.STREAMING_FRAME_PIPE ?? '');
createInterface({ input: socket }).on('line', (line) => {
  console.log(`input ${line}`);
  if (line.includes('"type":"key"')) luma = Math.min(235, luma + 40);
});
socket.on('connect', () => {
  let row = 0;
  setInterval(() => {
    frame.fill(luma, 0, width * height);
    row = (row + 4) % (height - 8);
    frame.fill(235, row * width, (row + 8) * width);
    socket.write(frame);
  }, 1000 / fps);
});
socket.on('close', () => process.exit(0));
