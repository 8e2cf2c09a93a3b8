// The browser client in headless Chromium against the real app: straight to the app (frames decode, input
// reaches the picture, a dropped WebSocket resumes), and relay-only through coturn with REST credentials
// (the selected candidate pair is a TURN relay and frames still decode).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM, COTURN, FFMPEG, freeTcpPort, freeUdpRange, missingTools, startApp, udpPortsOf, which, type AppProcess } from './helpers.ts';

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

type Snapshot = {
  state: string;
  framesPresented: number;
  framesDecodedFromBarcode: number;
  lastFrameNumber?: number;
  lastInputSeq?: number;
  setupMs?: number;
  inputToPhotonMs: number[];
  metrics: { localCandidateType?: string; remoteCandidateType?: string; codec?: string; framesDecoded?: number };
  status: string;
  inputReady: boolean;
  ended?: string;
};

const snapshot = (page: Page): Promise<Snapshot> => page.evaluate('svcStream.snapshot()') as Promise<Snapshot>;

async function waitForSnapshot(page: Page, what: string, predicate: (s: Snapshot) => boolean, timeoutMs = 20_000): Promise<Snapshot> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await snapshot(page).catch(() => undefined);
    if (s && predicate(s)) return s;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last snapshot: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function clientUrl(app: AppProcess, query = ''): string {
  return `http://127.0.0.1:${app.streamingPort}/client/?autostart=1&signal=${encodeURIComponent(app.signalingUrl())}${query}`;
}

describe('browser client in Chromium', { skip: missingTools([FFMPEG, CHROMIUM]) }, () => {
  let context: BrowserContext;
  let profile = '';
  before(async () => {
    profile = await mkdtemp(join(tmpdir(), 'svc-chromium-'));
    context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM.path, args: CHROMIUM_ARGS, headless: true });
  });
  after(async () => {
    await context?.close();
    await rm(profile, { recursive: true, force: true });
  });

  test('loads the client from the app, decodes frames, reflects input, resumes after a dropped WebSocket', async (t) => {
    const app = await startApp();
    t.after(() => app.stop());
    const page = await context.newPage();
    t.after(() => page.close());
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    await page.goto(clientUrl(app));

    // Until a picture is shown the page says what it waits for; "streaming" only over a picture.
    const early = await snapshot(page);
    if (early.state === 'streaming') assert.ok(early.framesPresented > 0, 'streaming only once a frame was presented');
    const first = await waitForSnapshot(page, '30 decoded frames', (s) => s.framesDecodedFromBarcode >= 30);
    assert.equal(first.state, 'streaming');
    assert.ok(first.setupMs !== undefined && first.setupMs > 0, 'setup time measured from the first frame');
    assert.equal(first.metrics.codec, 'video/H264');
    // The app is the DTLS client: its ClientHello leaves when its ICE is done (see PeerLink.createOffer).
    const connected = await app.waitForLog((l) => l.msg === 'peer connection state' && l.state === 'connected');
    assert.equal(connected.dtlsRole, 'client');

    const seq = await page.evaluate('svcStream.sendPointer(0.8, 0.6)') as number;
    assert.ok(seq >= 1, 'input sent over the DataChannel');
    const withInput = await waitForSnapshot(page, 'the input in a frame', (s) => (s.lastInputSeq ?? 0) >= seq && s.inputToPhotonMs.length >= 1);
    assert.ok(withInput.inputToPhotonMs[0] > 0, 'input-to-photon latency measured');

    await page.evaluate('svcStream.dropSocket()');
    await app.waitForLog((l) => l.msg === 'session resumed');
    const resumedAt = (await snapshot(page)).framesDecodedFromBarcode;
    const resumed = await waitForSnapshot(page, 'frames after resume', (s) => s.framesDecodedFromBarcode >= resumedAt + 20 && s.status === 'resumed');
    assert.ok((resumed.lastFrameNumber ?? 0) > (first.lastFrameNumber ?? 0));

    await page.evaluate('svcStream.bye("test done")');
    assert.deepEqual(await app.exited, { code: 0, signal: null });
    assert.deepEqual(errors, []);
  });

  test('input given before the input channel opens is held and sent once it does', async (t) => {
    const app = await startApp();
    t.after(() => app.stop());
    const page = await context.newPage();
    t.after(() => page.close());
    // The channel's open event reaches the page only when the test says (as on a link that lost its SCTP set-up).
    await page.addInitScript(`{
      let release;
      const released = new Promise((resolve) => { release = resolve; });
      globalThis.releaseInputChannel = release;
      const onopen = Object.getOwnPropertyDescriptor(RTCDataChannel.prototype, 'onopen');
      Object.defineProperty(RTCDataChannel.prototype, 'onopen', {
        set(handler) { onopen.set.call(this, (event) => void released.then(() => handler.call(this, event))); },
        get() { return onopen.get.call(this); },
      });
    }`);
    await page.goto(clientUrl(app));
    const streaming = await waitForSnapshot(page, 'frames before the channel', (s) => s.framesDecodedFromBarcode >= 5);
    assert.equal(streaming.inputReady, false, 'the channel is not open yet');
    assert.equal(await page.evaluate('svcStream.sendButton(0, true)'), undefined, 'not sent yet');
    await page.evaluate('svcStream.sendButton(0, false)');
    await page.evaluate('releaseInputChannel()');
    const reflected = await waitForSnapshot(page, 'the held input in a frame', (s) => (s.lastInputSeq ?? 0) >= 2);
    assert.equal(reflected.inputReady, true);
  });

  test('relay only through coturn with TURN REST credentials', { skip: missingTools([COTURN]) }, async (t) => {
    const turn = await startCoturn();
    t.after(() => turn.stop());
    const app = await startApp();
    t.after(() => app.stop());

    // What the platform does before each session: fresh REST credentials, posted to the control server.
    const username = `${Math.floor(Date.now() / 1000) + 600}:relay-test-session`;
    const password = createHmac('sha1', turn.secret).update(username).digest('base64');
    const posted = await fetch(app.controlUrl('/v1/streaming/creds'), {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ stunIp: '127.0.0.1', stunPort: turn.port, username, password }),
    });
    assert.equal(posted.status, 200);

    const page = await context.newPage();
    t.after(() => page.close());
    await page.goto(clientUrl(app, '&relay=1'));
    const s = await waitForSnapshot(page, '30 decoded frames over the relay', (x) => x.framesDecodedFromBarcode >= 30 && x.metrics.localCandidateType !== undefined, 30_000);
    assert.equal(s.metrics.localCandidateType, 'relay', 'the browser side of the selected pair is a TURN relay');
    // With credentials the app gathered more than host candidates from the STUN/TURN server.
    const remoteTypes = await page.evaluate(`svcStream.client.peerConnection.getStats().then((report) => {
      const types = [];
      report.forEach((s) => { if (s.type === 'remote-candidate') types.push(s.candidateType); });
      return types;
    })`) as string[];
    t.diagnostic(`app candidates seen by the browser: ${remoteTypes.join(', ')}`);
    assert.ok(remoteTypes.includes('relay'), 'the app offered a relayed candidate of its own');

    // The app asked the TURN server for an allocation too; its sockets stay inside the range.
    const sockets = udpPortsOf(app.pid);
    if (sockets) {
      assert.ok(sockets.length >= 2, `host socket and TURN client socket (got ${sockets.join(',')})`);
      for (const port of sockets) assert.ok(port >= app.range.min && port <= app.range.max, `UDP port ${port} outside the range`);
    }
    const log = await readFile(turn.logFile, 'utf8');
    assert.match(log, /ALLOCATE processed, success/, 'coturn granted allocations');

    await page.evaluate('svcStream.bye("test done")');
    assert.deepEqual(await app.exited, { code: 0, signal: null });
  });
});

type Coturn = { port: number; secret: string; logFile: string; stop(): Promise<void> };

/** coturn on loopback with REST-style ephemeral credentials (use-auth-secret), as the platform runs it. */
async function startCoturn(): Promise<Coturn> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-coturn-'));
  const port = await freeTcpPort();
  const relay = await freeUdpRange(20);
  const secret = randomBytes(16).toString('hex');
  const logFile = join(dir, 'turn.log');
  // The secret goes in a 0600 file, as the platform passes it: never on a command line.
  const configFile = join(dir, 'turnserver.conf');
  await writeFile(configFile, [
    'listening-ip=127.0.0.1', 'relay-ip=127.0.0.1', `listening-port=${port}`, `min-port=${relay.min}`, `max-port=${relay.max}`,
    'use-auth-secret', `static-auth-secret=${secret}`, 'realm=svc.test', 'allow-loopback-peers', 'no-cli', 'no-tls', 'no-dtls',
    'fingerprint', `log-file=${logFile}`, 'simple-log', 'no-stdout-log', `pidfile=${join(dir, 'turn.pid')}`, 'verbose', '',
  ].join('\n'), { mode: 0o600 });
  const child: ChildProcess = spawn(which('turnserver') ?? 'turnserver', ['-c', configFile], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Ready once it answers a STUN binding request.
  const deadline = Date.now() + 10_000;
  while (!(await stunAnswers(port))) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`coturn did not start; see ${logFile}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    port, secret, logFile,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function stunAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket('udp4');
    const request = Buffer.alloc(20);
    request.writeUInt16BE(0x0001, 0); // Binding request
    request.writeUInt32BE(0x2112a442, 4); // magic cookie
    randomBytes(12).copy(request, 8);
    const timer = setTimeout(() => { socket.close(); resolve(false); }, 200);
    socket.once('message', () => { clearTimeout(timer); socket.close(); resolve(true); });
    socket.once('error', () => { clearTimeout(timer); socket.close(); resolve(false); });
    socket.send(request, port, '127.0.0.1');
  });
}
