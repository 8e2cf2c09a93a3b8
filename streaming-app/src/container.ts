// Composition root of the streaming container (main.ts loads it).
// Start-up does the slow things once (DTLS certificate, encoder probe, warm encoder process, the display
// and the application) so that a session pays only for signaling, ICE and DTLS. After its one session the
// process exits 0; every helper process it started goes with it (children.ts).
import { RTCDtlsTransport } from 'werift';
import { CloseCode } from '../client/protocol.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { createClientFiles } from './client-files.ts';
import { createControlServer, type Readiness } from './control-server.ts';
import { CredentialStore } from './credentials.ts';
import { PulseServer } from './audio.ts';
import { killAllChildren } from './children.ts';
import { chooseEncoder, VideoEncoder, type EncodedFrame, type EncoderSettings, type FrameEncoder } from './encoder.ts';
import { openInProcessEncoder } from './libav-encoder.ts';
import type { FrameSource, SourceEvents } from './frame-source.ts';
import { createLogger, type Logger } from './logger.ts';
import { countFreePorts, PORTS_PER_SESSION } from './port-budget.ts';
import { StreamingSession } from './session.ts';
import { PipeSource } from './pipe-source.ts';
import { SceneSource } from './scene-source.ts';
import { createSignalingServer } from './signaling.ts';
import { X11Source } from './x11-source.ts';
import type { Application } from './app.ts';

const PORT_CHECK_CACHE_MS = 1000;

function readConfig(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) failStartup(error.message);
    throw error;
  }
}

/** The one line a failed start-up leaves on stderr (the platform shows it to the function's owner). */
function failStartup(message: string): never {
  process.stderr.write(`streaming-app: ${message}\n`);
  killAllChildren();
  process.exit(1);
}

async function openSource(config: Config, encoder: FrameEncoder, log: Logger, appEnv: Record<string, string>, events: SourceEvents): Promise<FrameSource> {
  if (config.source.kind === 'scene') return new SceneSource(encoder, config.width, config.height, config.fps, config.barcode);
  if (config.source.kind === 'x11') return X11Source.open(config, encoder, log, appEnv, events);
  return PipeSource.open(config, encoder, log, appEnv, events);
}

/**
 * The in-process encoder first (its rate follows the bandwidth estimate), else the ffmpeg CLI at the
 * configured rate; STREAMING_ENCODER_BACKEND picks one of them outright.
 */
async function openEncoder(config: Config, log: Logger, onFrame: (frame: EncodedFrame) => void, onFatal: (reason: string) => void): Promise<FrameEncoder> {
  const base: Omit<EncoderSettings, 'encoder'> = {
    width: config.width, height: config.height, fps: config.fps, bitrateKbps: config.bitrateKbps,
    keyframeIntervalFrames: config.fps * config.keyframeIntervalSeconds, ffmpegPath: config.ffmpegPath,
  };
  if (config.encoderBackend !== 'ffmpeg') {
    try {
      return await openInProcessEncoder(config.encoder, base, log, onFrame, onFatal, config.degradation);
    } catch (error) {
      if (config.encoderBackend === 'libav') throw error;
      log.warn({ reason: (error as Error).message }, 'in-process encoder unavailable: the ffmpeg CLI encodes at a fixed rate');
    }
  }
  const settings = await chooseEncoder(config.encoder, base, log);
  return new VideoEncoder(settings, log, onFrame, onFatal);
}

async function main(): Promise<void> {
  const config = readConfig();
  const log = createLogger(config.logLevel);
  let encoder: FrameEncoder | undefined;
  log.info({ source: config.source.kind, why: config.source.reason, audio: config.audio.enabled, audioWhy: config.audio.reason }, 'frame source chosen');
  const crash = (kind: string) => (error: unknown): void => {
    log.fatal({ err: error }, kind);
    encoder?.stop();
    killAllChildren();
    process.exit(1);
  };
  process.on('uncaughtException', crash('uncaught exception'));
  process.on('unhandledRejection', crash('unhandled rejection'));

  const credentials = new CredentialStore();
  let session: StreamingSession | undefined;
  const onFrame = (frame: EncodedFrame): void => session?.deliver(frame);
  const onFatal = (reason: string): void => {
    log.error({ reason }, 'encoder failed');
    session?.end(`encoder failed: ${reason}`, true);
  };
  // The certificate is made while the encoder opens (or its trial runs in its own process).
  const [, opened] = await Promise.all([RTCDtlsTransport.SetupCertificate(), openEncoder(config, log, onFrame, onFatal).catch((error: unknown) => {
    log.fatal({ err: error }, 'no video encoder');
    process.exit(1);
  })]);
  encoder = opened;
  encoder.prepare();

  // The sound server comes first: the application finds it in its environment. Without STREAMING_AUDIO=true
  // a server that does not start costs the sound, not the session.
  const audio = config.audio.enabled
    ? await PulseServer.start(config.pulseaudioPath).catch((error: unknown) => {
      if (config.audio.required) return failStartup((error as Error).message);
      log.warn({ reason: (error as Error).message }, 'no audio: the sound server did not start');
      return undefined;
    })
    : undefined;
  const source = await openSource(config, encoder, log, audio?.appEnv ?? {}, {
    onFailure: (reason) => {
      log.error({ reason }, 'frame source failed');
      session?.end(reason, true);
    },
    onClipboard: (text) => session?.sendClipboard(text),
  }).catch((error: unknown) => {
    encoder?.stop();
    return failStartup((error as Error).message);
  });

  let shuttingDown = false;
  const servers: { close(): Promise<void> }[] = [];
  const shutdown = (code: number, reason: string): void => {
    if (shuttingDown) return;
    shuttingDown = true;
    // Keep answering "not ready" for a moment so the platform's health probe sees the session is over
    // before the process disappears.
    const closing = source.close().then(() => audio?.stop());
    setTimeout(() => {
      Promise.allSettled([closing, ...servers.map((s) => s.close())]).then(() => {
        log.info({ code, reason }, 'exiting');
        process.exit(code);
      });
    }, config.exitDelayMs);
  };

  session = new StreamingSession({ config, log, credentials, encoder, source, audio, onEnded: (reason, error) => shutdown(error ? 1 : 0, reason) });
  if (source.app) endWithApplication(source.app, session, log);
  void audio?.exited.then(() => { if (!shuttingDown) session?.end('the sound server exited', true); });
  const readiness = createReadiness(config, session, log);

  const control = createControlServer({ readiness, credentials, log });
  servers.push(control);
  const signaling = createSignalingServer({
    session, startEndpoint: config.startEndpoint, keepaliveMs: config.keepaliveMs, log,
    clientFiles: config.serveClient ? createClientFiles() : undefined,
  });
  servers.push(signaling);
  await control.listen(config.controlPort);
  await signaling.listen(config.streamingPort);

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      log.info({ signal }, 'termination requested');
      if (session?.state === 'ended') shutdown(0, signal);
      else session?.end(`terminated by ${signal}`, false, CloseCode.goingAway);
    });
  }

  const cpu = process.cpuUsage();
  log.info({
    controlPort: config.controlPort, streamingPort: config.streamingPort, startEndpoint: config.startEndpoint,
    portRange: config.portRange, bindAddress: config.bindAddress, resumeWindowMs: config.resumeWindowMs,
    clientUrl: config.serveClient ? `http://${config.bindAddress}:${config.streamingPort}/client/` : undefined,
    startupMs: Math.round(performance.now()), startupCpuMs: Math.round((cpu.user + cpu.system) / 1000),
  }, 'streaming app listening');
}

/**
 * The application's exit ends the session (or, before one, the container): the browser gets a bye
 * naming how it ended and close code 4502. A clean exit (code 0) ends the container with 0, a crash with 1.
 */
function endWithApplication(app: Application, session: StreamingSession, log: Logger): void {
  void app.exited.then(() => {
    log.info({ exit: app.exit, crashed: app.crashed }, 'application exited');
    session.end(`the application ${app.describeExit()}`, app.crashed, CloseCode.applicationExited);
  });
}

/** 200 only while a session can start: before it, with enough free ports in the binding range. */
function createReadiness(config: Config, session: StreamingSession, log: Logger): () => Promise<Readiness> {
  let checkedAt = -Infinity;
  let lastFree = 0;
  return async () => {
    if (session.state === 'ended') return { ready: false, reason: `session over (${session.endReason ?? 'ended'}); this container serves no more sessions` };
    if (session.state !== 'idle') return { ready: false, reason: 'a session is in progress' };
    if (performance.now() - checkedAt > PORT_CHECK_CACHE_MS) {
      lastFree = await countFreePorts(config.portRange, config.bindAddress, PORTS_PER_SESSION);
      checkedAt = performance.now();
      if (lastFree < PORTS_PER_SESSION) log.warn({ free: lastFree, portRange: config.portRange }, 'port budget used up');
    }
    if (lastFree < PORTS_PER_SESSION) {
      return { ready: false, reason: `port budget used up: ${lastFree} free UDP port(s) in ${config.portRange.min}-${config.portRange.max}, ${PORTS_PER_SESSION} needed` };
    }
    return { ready: true };
  };
}

await main();
