// The STUN/TURN server the platform hands to streaming sessions (spec 2.4, 4.6):
// - coturn (Debian `coturn`), run by the platform with REST-style ephemeral credentials: STUN and relay;
// - node-turn in-process when coturn is absent: it answers STUN, but drops TURN ChannelData, so it cannot
//   relay WebRTC media (sessions still get host and server-reflexive candidates);
// - an external TURN server the operator runs with the same shared secret;
// - none: sessions get no STUN/TURN at all (host candidates only).
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Turn from 'node-turn';
import type { Logger } from '../logger.ts';
import { reapStale, startAuxiliary, type Auxiliary } from '../process/auxiliary.ts';
import { portFree, portInUse } from '../process/ports.ts';
import { mintTurnCredentials, type TurnCredentials } from './credentials.ts';

export interface TurnSettings {
  server: 'auto' | 'coturn' | 'node-turn' | 'external' | 'none';
  /** Address sessions are told to reach the server at (stunIp). */
  publicIp: string;
  listenIp: string;
  port: number;
  relayPortRange: [number, number];
  realm: string;
  secret: string;
  credentialTtlSeconds: number;
  coturnBinary: string;
  /** Where coturn's pid file is kept (<dataDir>/run), so a later start can end one a crash left. */
  runDir: string;
}

/** What a streaming container is told (POST /v1/streaming/creds). */
export interface SessionCredentials {
  stunIp: string;
  stunPort: number;
  username: string;
  password: string;
}

export interface TurnService {
  readonly kind: 'coturn' | 'node-turn' | 'external' | 'none';
  /** Fresh credentials for one session, or undefined when there is no STUN/TURN server. */
  credentialsFor(sessionId: string, now: Date): SessionCredentials | undefined;
  close(): Promise<void>;
}

export async function startTurn(settings: TurnSettings, log: Logger): Promise<TurnService> {
  const kind = settings.server === 'auto' ? (existsSync(settings.coturnBinary) ? 'coturn' : 'node-turn') : settings.server;
  if (kind === 'none') return { kind, credentialsFor: () => undefined, close: async () => {} };

  const expiring: { username: string; expiresAt: number }[] = [];
  let nodeTurn: InstanceType<typeof Turn> | undefined;
  let coturn: Auxiliary | undefined;
  let workDir: string | undefined;

  // Either server of ours would go on without its port (coturn answers nothing; node-turn shares it),
  // unnoticed. A coturn an earlier run left is ended first: a port still taken belongs to something else.
  if (kind === 'coturn') await reapStale(settings.runDir, 'coturn', log);
  for (const protocol of kind === 'external' ? [] : ['udp', 'tcp'] as const) {
    if (!await portFree(protocol, settings.listenIp, settings.port)) {
      throw portInUse(`the TURN server (${protocol.toUpperCase()})`, `${settings.listenIp}:${settings.port}`, 'turn.listenIp, turn.port: SVC_TURN_LISTEN_IP, SVC_TURN_PORT');
    }
  }
  if (kind === 'coturn') {
    // Everything, the shared secret above all, goes in a 0600 file in a 0700 directory: a command line
    // is readable by every local user (ps). The directory is the data dir's, made afresh at each start, so
    // what a killed run left there is replaced, not left in /tmp.
    workDir = path.join(settings.runDir, 'coturn');
    rmSync(workDir, { recursive: true, force: true });
    mkdirSync(workDir, { recursive: true, mode: 0o700 });
    const configFile = path.join(workDir, 'turnserver.conf');
    writeFileSync(configFile, coturnConfig(settings, workDir), { mode: 0o600 });
    coturn = await startAuxiliary({ name: 'coturn', command: settings.coturnBinary, args: ['-c', configFile], runDir: settings.runDir, log });
    void coturn.exited.then((code) => code !== null && code !== 0 && log.error({ code }, 'coturn exited'));
    try {
      await waitForStun(settings.listenIp === '0.0.0.0' ? '127.0.0.1' : settings.listenIp, settings.port, coturn);
    } catch (error) {
      await coturn.stop();
      rmSync(workDir, { recursive: true, force: true });
      throw error;
    }
  } else if (kind === 'node-turn') {
    nodeTurn = new Turn({
      listeningPort: settings.port, listeningIps: [settings.listenIp], relayIps: [settings.listenIp],
      minPort: settings.relayPortRange[0], maxPort: settings.relayPortRange[1], authMech: 'long-term', realm: settings.realm,
      debugLevel: 'OFF', credentials: {},
    });
    nodeTurn.start();
  }
  log.info({ turn: kind, stun: `${settings.publicIp}:${settings.port}` }, 'STUN/TURN for streaming sessions');

  return {
    kind,
    credentialsFor(sessionId, now) {
      const minted: TurnCredentials = mintTurnCredentials(settings.secret, sessionId, settings.credentialTtlSeconds, now);
      if (nodeTurn) {
        // node-turn has no REST mechanism: each session's pair is added as a user until it expires.
        nodeTurn.addUser(minted.username, minted.password);
        expiring.push({ username: minted.username, expiresAt: minted.expiresAt.getTime() });
        while (expiring.length && expiring[0].expiresAt <= now.getTime()) nodeTurn.removeUser(expiring.shift()!.username);
      }
      return { stunIp: settings.publicIp, stunPort: settings.port, username: minted.username, password: minted.password };
    },
    async close() {
      nodeTurn?.stop();
      await coturn?.stop();
      if (workDir) rmSync(workDir, { recursive: true, force: true });
    },
  };
}

function coturnConfig(settings: TurnSettings, workDir: string): string {
  return [
    `listening-ip=${settings.listenIp}`, `relay-ip=${settings.listenIp}`, `external-ip=${settings.publicIp}`,
    `listening-port=${settings.port}`, `min-port=${settings.relayPortRange[0]}`, `max-port=${settings.relayPortRange[1]}`,
    'use-auth-secret', `static-auth-secret=${settings.secret}`, `realm=${settings.realm}`, 'fingerprint',
    'no-cli', 'no-tls', 'no-dtls', 'no-multicast-peers', 'simple-log', 'no-stdout-log',
    `log-file=${path.join(workDir, 'turn.log')}`, `pidfile=${path.join(workDir, 'turn.pid')}`,
    // Sessions on one machine (the embedded default) relay between loopback addresses.
    ...(settings.listenIp.startsWith('127.') ? ['allow-loopback-peers'] : []),
  ].join('\n') + '\n';
}

/** coturn is up once it answers a STUN binding request. */
async function waitForStun(host: string, port: number, coturn: Auxiliary) {
  let exitCode: number | null | undefined;
  void coturn.exited.then((code) => { exitCode = code; });
  for (let attempt = 0; attempt < 100; attempt++) {
    if (exitCode !== undefined) throw new Error(`coturn exited with ${exitCode} at start (is port ${port} free?)`);
    if (await stunAnswers(host, port)) return;
    await sleep(100);
  }
  throw new Error(`coturn did not answer STUN on ${host}:${port}`);
}

export function stunAnswers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket('udp4');
    const request = Buffer.alloc(20);
    request.writeUInt16BE(0x0001, 0);
    request.writeUInt32BE(0x2112a442, 4);
    randomBytes(12).copy(request, 8);
    const done = (answered: boolean) => {
      clearTimeout(timer);
      socket.close();
      resolve(answered);
    };
    const timer = setTimeout(() => done(false), 200);
    socket.once('message', () => done(true));
    socket.once('error', () => done(false));
    socket.send(request, port, host);
  });
}
