// Composition root of the streaming container: `node streaming-app/src/main.ts`.
// Start-up does the slow things once (DTLS certificate, encoder probe, warm encoder process) so that a
// session pays only for signaling, ICE and DTLS. After its one session the process exits 0.
import { RTCDtlsTransport } from 'werift';
import { CloseCode } from '../client/protocol.ts';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { createClientFiles } from './client-files.ts';
import { createControlServer, type Readiness } from './control-server.ts';
import { CredentialStore } from './credentials.ts';
import { chooseEncoder, VideoEncoder } from './encoder.ts';
import { createLogger, type Logger } from './logger.ts';
import { countFreePorts, PORTS_PER_SESSION } from './port-budget.ts';
import { StreamingSession } from './session.ts';
import { createSignalingServer } from './signaling.ts';

const PORT_CHECK_CACHE_MS = 1000;

function readConfig(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`streaming-app: ${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
}

async function main(): Promise<void> {
  const config = readConfig();
  const log = createLogger(config.logLevel);
  let encoder: VideoEncoder | undefined;
  const crash = (kind: string) => (error: unknown): void => {
    log.fatal({ err: error }, kind);
    encoder?.stop();
    process.exit(1);
  };
  process.on('uncaughtException', crash('uncaught exception'));
  process.on('unhandledRejection', crash('unhandled rejection'));

  await RTCDtlsTransport.SetupCertificate();
  const settings = await chooseEncoder(config.encoder, {
    width: config.width, height: config.height, fps: config.fps, bitrateKbps: config.bitrateKbps,
    keyframeIntervalFrames: config.fps * config.keyframeIntervalSeconds, ffmpegPath: config.ffmpegPath,
  }, log).catch((error: unknown) => {
    log.fatal({ err: error }, 'no video encoder');
    process.exit(1);
  });

  const credentials = new CredentialStore();
  let session: StreamingSession | undefined;
  encoder = new VideoEncoder(settings, log, (frame) => session?.deliver(frame), (reason) => {
    log.error({ reason }, 'encoder failed');
    session?.end(`encoder failed: ${reason}`, true);
  });
  encoder.prepare();

  let shuttingDown = false;
  const servers: { close(): Promise<void> }[] = [];
  const shutdown = (code: number, reason: string): void => {
    if (shuttingDown) return;
    shuttingDown = true;
    // Keep answering "not ready" for a moment so the platform's health probe sees the session is over
    // before the process disappears.
    setTimeout(() => {
      Promise.allSettled(servers.map((s) => s.close())).then(() => {
        log.info({ code, reason }, 'exiting');
        process.exit(code);
      });
    }, config.exitDelayMs);
  };

  session = new StreamingSession({ config, log, credentials, encoder, onEnded: (reason, error) => shutdown(error ? 1 : 0, reason) });
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

  log.info({
    controlPort: config.controlPort, streamingPort: config.streamingPort, startEndpoint: config.startEndpoint,
    portRange: config.portRange, bindAddress: config.bindAddress, resumeWindowMs: config.resumeWindowMs,
    clientUrl: config.serveClient ? `http://${config.bindAddress}:${config.streamingPort}/client/` : undefined,
  }, 'streaming app listening');
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
