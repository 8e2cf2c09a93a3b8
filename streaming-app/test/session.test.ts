// A whole session against the real app process with a werift peer playing the browser: signaling,
// decodable frames, input reflected in the frame barcode, media ports inside the range, refusal of a
// second session, resume after a dropped WebSocket, and the end of the container (ready 500, exit 0).
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { describe, test } from 'node:test';
import { CloseCode } from '../client/protocol.ts';
import { chooseEncoder } from '../src/encoder.ts';
import { createLogger } from '../src/logger.ts';
import { BIND_ADDRESS, decodeFrames, FFMPEG, freeUdpRange, missingTools, SignalingClient, startApp, udpPortsOf, WeriftViewer } from './helpers.ts';

const skip = missingTools([FFMPEG]);

/** Port of the local socket behind an SDP candidate line: the host port, or raddr/rport otherwise. */
function candidatePort(line: string): number {
  const fields = line.replace(/^candidate:/, '').split(' ');
  if (fields[7] === 'host') return Number(fields[5]);
  const rport = fields.indexOf('rport');
  return Number(fields[rport + 1]);
}

describe('streaming session', { skip }, () => {
  test('a werift peer streams, sends input, resumes after a drop, and the container ends after bye', async (t) => {
    const app = await startApp({ STREAMING_RESUME_WINDOW_SECONDS: '20' });
    t.after(() => app.stop());
    assert.equal(await app.readyStatus(), 200, 'ready before the session');

    // The platform forwards the browser's query string untouched; the app must accept it.
    const viewer = new WeriftViewer(app.signalingUrl('?session=abc&x=1'));
    t.after(() => viewer.close());
    const config = await viewer.hello();
    assert.equal(config.resumed, false);
    assert.equal(config.video.width, 320);
    assert.equal(config.video.height, 180);
    assert.deepEqual(config.iceServers, [], 'no credentials posted: no ICE servers at all');
    assert.ok(config.resumeToken.length >= 32);
    assert.equal(await app.readyStatus(), 500, 'not ready while the session runs');

    await t.test('a second session is refused while one is live', async () => {
      const intruder = new SignalingClient(app.signalingUrl());
      await intruder.opened;
      intruder.send({ type: 'hello', protocol: 1 });
      const closed = await intruder.closed;
      assert.equal(closed.code, CloseCode.busy);
      assert.match(closed.reason, /busy/);

      const guesser = new SignalingClient(app.signalingUrl());
      await guesser.opened;
      guesser.send({ type: 'hello', protocol: 1, resumeToken: 'not-the-token' });
      assert.equal((await guesser.closed).code, CloseCode.badResumeToken);
    });

    await t.test('at least 60 frames arrive and decode, each with a valid, increasing frame number', async () => {
      await viewer.waitForFrames(70);
      const decoded = await decodeFrames(viewer.frames.slice(0, 70), viewer.codec ?? '', 320, 180);
      const valid = decoded.filter((f) => f.frameNumber > 0);
      assert.ok(decoded.length >= 60, `decoded ${decoded.length} of 70 frames`);
      assert.ok(valid.length >= 60, `${valid.length} frames with a readable barcode`);
      for (let i = 1; i < valid.length; i++) assert.ok(valid[i].frameNumber > valid[i - 1].frameNumber, 'frame numbers increase');
    });

    await t.test('every media port is inside STREAMING_PORT_BINDING_RANGE', () => {
      const candidates = viewer.remoteCandidates.filter((c): c is string => c !== null);
      assert.ok(candidates.length >= 1, 'the app trickled candidates');
      // No credentials were posted: host candidates only, no public STUN server was asked.
      for (const line of candidates) assert.match(line, / typ host /);
      for (const line of candidates) {
        const port = candidatePort(line);
        assert.ok(port >= app.range.min && port <= app.range.max, `candidate port ${port} outside ${app.range.min}-${app.range.max}: ${line}`);
      }
      const sockets = udpPortsOf(app.pid);
      if (sockets === undefined) return t.diagnostic('no /proc: socket check skipped');
      t.diagnostic(`app UDP sockets: ${sockets.join(', ')} (range ${app.range.min}-${app.range.max})`);
      assert.ok(sockets.length >= 1, 'the app holds its media socket');
      for (const port of sockets) assert.ok(port >= app.range.min && port <= app.range.max, `UDP socket on port ${port} outside the range`);
    });

    await t.test('input over the DataChannel shows up in the frame barcode', async () => {
      const channel = await viewer.channelOpen;
      channel.send(JSON.stringify({ type: 'pointer', seq: 41, t: 0, x: 0.25, y: 0.75 }));
      channel.send(JSON.stringify({ type: 'key', seq: 42, t: 0, key: '3' }));
      // Seq 42 exists only after the input, so any frame with it will do. On a loaded machine the encoder
      // may hold more than half a second of frames: look again as more arrive, up to 10 s of them.
      const from = viewer.frames.length;
      let seen = false;
      for (let more = 15; !seen && more <= 300; more += 15) {
        await viewer.waitForFrames(from + more);
        // The whole stream so far: decoding needs its first keyframe.
        const decoded = await decodeFrames(viewer.frames, viewer.codec ?? '', 320, 180);
        seen = decoded.some((f) => f.inputSeq === 42);
      }
      assert.ok(seen, 'a frame after the input carries input seq 42');
    });

    await t.test('a picture loss indication is answered with a fresh keyframe', async () => {
      const keyframes = viewer.keyframes;
      assert.ok(keyframes >= 1, 'the stream started with a keyframe');
      await viewer.sendPli();
      await app.waitForLog((l) => (l.msg === 'encoder switched for keyframe' || l.msg === 'keyframe requested') && l.reason === 'pli');
      const deadline = Date.now() + 10_000;
      while (viewer.keyframes === keyframes && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(viewer.keyframes > keyframes, 'a new keyframe arrived after the PLI');
    });

    await t.test('a dropped WebSocket resumes the same session and media keeps flowing', async () => {
      const before = viewer.frames.length;
      const resumed = await viewer.resume(true);
      assert.equal(resumed.resumed, true);
      assert.equal(resumed.sessionId, config.sessionId);
      await app.waitForLog((l) => l.msg === 'session resumed');
      await viewer.waitForFrames(before + 30);
      assert.equal(app.logs.filter((l) => l.msg === 'offer sent').length, 1, 'the peer connection survived: no new offer');
    });

    await t.test('a resume without a peer (page reload) gets a new peer connection; old ports are released', async () => {
      const before = viewer.frames.length;
      const resumed = await viewer.resume(false);
      assert.equal(resumed.sessionId, config.sessionId);
      await viewer.waitForFrames(before + 30);
      assert.equal(app.logs.filter((l) => l.msg === 'offer sent').length, 2, 'a second offer for the new peer connection');
      const decoded = await decodeFrames(viewer.frames.slice(before), viewer.codec ?? '', 320, 180);
      assert.ok(decoded.filter((f) => f.frameNumber > 0).length >= 25, 'the new peer connection starts with a decodable keyframe');
      const sockets = udpPortsOf(app.pid);
      if (sockets) {
        assert.equal(sockets.length, 1, `one media socket after the switch (got ${sockets.join(',')})`);
        assert.ok(sockets[0] >= app.range.min && sockets[0] <= app.range.max);
      }
    });

    await t.test('bye ends the session: ready turns 500, new connections are refused, exit code 0', async () => {
      viewer.signaling.send({ type: 'bye', reason: 'test done' });
      const bye = await viewer.signaling.next('bye');
      assert.match(bye.reason, /bye/);
      assert.equal(await app.readyStatus(), 500, 'not ready once the session is over');
      const late = new SignalingClient(app.signalingUrl());
      assert.equal((await late.closed).code, CloseCode.sessionOver);
      const exit = await app.exited;
      assert.deepEqual(exit, { code: 0, signal: null });
      const ended = app.logs.find((l) => l.msg === 'session ended');
      assert.match(String(ended?.reason), /bye/);
    });
  });

  test('the picture flows as soon as DTLS is done, while the input channel is still coming up', async (t) => {
    const app = await startApp();
    t.after(() => app.stop());
    let channelPathClears!: () => void;
    const viewer = new WeriftViewer(app.signalingUrl(), { sctpLostUntil: new Promise((resolve) => { channelPathClears = resolve; }) });
    t.after(() => viewer.close());
    await viewer.hello();
    await viewer.waitForFrames(10);
    assert.notEqual(viewer.channel?.readyState, 'open', 'the frames came before the input channel');
    assert.equal(app.logs.some((l) => l.msg === 'peer connection state' && l.state === 'connected'), false, 'werift counts the channel in its state');
    channelPathClears();
    assert.equal((await viewer.channelOpen).readyState, 'open', 'the channel comes up once its packets get through');
    await app.waitForLog((l) => l.msg === 'peer connection state' && l.state === 'connected');
  });

  test('without a resume within the window the session ends and the process exits 0', async (t) => {
    const app = await startApp({ STREAMING_RESUME_WINDOW_SECONDS: '1' });
    t.after(() => app.stop());
    const viewer = new WeriftViewer(app.signalingUrl());
    t.after(() => viewer.close());
    await viewer.hello();
    await viewer.waitForFrames(5);
    viewer.signaling.ws.terminate();
    const exit = await app.exited;
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(app.logs.find((l) => l.msg === 'session ended')?.reason, 'resume window expired');
  });

  test('the VP8 (libvpx) pipeline streams decodable frames too', async (t) => {
    const app = await startApp({ STREAMING_ENCODER: 'libvpx' });
    t.after(() => app.stop());
    const viewer = new WeriftViewer(app.signalingUrl());
    t.after(() => viewer.close());
    const config = await viewer.hello();
    assert.equal(config.video.codec, 'VP8');
    await viewer.waitForFrames(40);
    assert.equal(viewer.codec, 'video/vp8');
    const decoded = await decodeFrames(viewer.frames.slice(0, 40), 'video/vp8', 320, 180);
    assert.ok(decoded.filter((f) => f.frameNumber > 0).length >= 35, 'VP8 frames decode with readable barcodes');
  });

  test('the in-process encoder is the default; STREAMING_ENCODER_BACKEND=ffmpeg streams through the CLI and its warm spare', async (t) => {
    const inProcess = await startApp();
    t.after(() => inProcess.stop());
    const chosen = await inProcess.waitForLog((l) => l.msg === 'video encoder selected');
    assert.equal(chosen.backend, 'libav');
    const app = await startApp({ STREAMING_ENCODER_BACKEND: 'ffmpeg' });
    t.after(() => app.stop());
    const cli = await app.waitForLog((l) => l.msg === 'video encoder selected');
    assert.equal(cli.backend, undefined, 'the CLI encoder was probed and chosen');
    const viewer = new WeriftViewer(app.signalingUrl());
    t.after(() => viewer.close());
    await viewer.hello();
    await viewer.waitForFrames(30);
    const keyframes = viewer.keyframes;
    await viewer.sendPli();
    await app.waitForLog((l) => l.msg === 'encoder switched for keyframe' && l.reason === 'pli');
    await viewer.waitForFrames(viewer.frames.length + 10);
    const decoded = await decodeFrames(viewer.frames.slice(0, 30), 'video/h264', 320, 180);
    assert.ok(decoded.filter((f) => f.frameNumber > 0).length >= 25, 'CLI-encoded frames decode with readable barcodes');
    assert.ok(viewer.keyframes > keyframes || viewer.frames.length > 40, 'frames keep coming after the switch');
  });

  test('ready is 500 while the port budget is used up, 200 again once ports are free', async (t) => {
    const range = await freeUdpRange(2);
    const app = await startApp({ STREAMING_PORT_BINDING_RANGE: `${range.min}-${range.max}` });
    t.after(() => app.stop());
    assert.equal(await app.readyStatus(), 200);
    // Another tenant of the host takes one of the two ports.
    const squatter: Socket = createSocket('udp4');
    await new Promise<void>((resolve) => squatter.bind({ port: range.min, address: BIND_ADDRESS, exclusive: true }, resolve));
    await new Promise((r) => setTimeout(r, 1100)); // the readiness check caches its port probe for 1 s
    const busy = await fetch(app.controlUrl('/v1/streaming/ready'));
    assert.equal(busy.status, 500);
    assert.match(String(((await busy.json()) as { detail: string }).detail), /port budget/);
    await new Promise<void>((resolve) => squatter.close(() => resolve()));
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal(await app.readyStatus(), 200);
  });

  test('encoder auto: without an NVIDIA device h264_nvenc is not tried, and the log says why', async () => {
    const lines: { msg: string; encoder?: string; reason?: string }[] = [];
    const log = createLogger('info', { write: (line: string) => { lines.push(JSON.parse(line)); } });
    const settings = await chooseEncoder('auto', { width: 320, height: 180, fps: 30, bitrateKbps: 800, keyframeIntervalFrames: 300, ffmpegPath: 'ffmpeg' },
      log, ['/nonexistent/nvidiactl']);
    assert.equal(settings.encoder, 'libx264');
    const skipped = lines.filter((line) => line.msg === 'video encoder unavailable').map((line) => [line.encoder, line.reason]);
    assert.deepEqual(skipped, [['h264_nvenc', 'no NVIDIA device (/nonexistent/nvidiactl)']]);
  });

  test('STREAMING_LIP_SYNC=true puts the tracks in one stream without a zero playout delay; by default neither (the picture never waits)', async (t) => {
    for (const lipSync of ['false', 'true']) {
      const app = await startApp({ STREAMING_LIP_SYNC: lipSync });
      t.after(() => app.stop());
      const viewer = new WeriftViewer(app.signalingUrl());
      t.after(() => viewer.close());
      await viewer.hello();
      const offer = await viewer.signaling.next('offer');
      assert.equal(/^a=msid:svc \S+/m.test(offer.sdp), lipSync === 'true', `the tracks in stream "svc" with STREAMING_LIP_SYNC=${lipSync}`);
      assert.equal(/^a=extmap:\d+ \S*playout-delay/m.test(offer.sdp), lipSync === 'false', `STREAMING_LIP_SYNC=${lipSync}`);
    }
  });

  test('a crashed encoder (the ffmpeg CLI backend, a process of its own) ends the process with a non-zero code', async (t) => {
    const app = await startApp({ STREAMING_ENCODER_BACKEND: 'ffmpeg' });
    t.after(() => app.stop());
    // Only real pids: an empty list must never become kill(0), which signals this test's own process group
    // (with the in-process encoder there is no child, and that took whole CI runs down).
    const children = await import('node:fs').then((fs) => fs.readFileSync(`/proc/${app.pid}/task/${app.pid}/children`, 'utf8')
      .split(/\s+/).map(Number).filter((pid) => pid > 0)).catch(() => []);
    if (children.length === 0) return t.skip('no /proc children list on this system');
    process.kill(children[0], 'SIGKILL');
    const exit = await app.exited;
    assert.equal(exit.code, 1);
    assert.ok(app.logs.some((l) => l.msg === 'encoder failed'));
  });
});
