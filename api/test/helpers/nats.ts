// A NATS server with JetStream of the test's own (Debian's nats-server) on a free loopback port, with
// authentication on, as an installation runs it: the installation's account has JetStream and its user
// (a password, token or nkey; or, in operator mode, a .creds file); a client without credentials is
// refused. Optionally TLS with a CA of the test's own that also verifies the client's certificate (or, as
// the Kubernetes manifests expect, asks for none). In CI nats-server must be installed; elsewhere its
// absence skips those tests with one printed line.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import { nkeys, type NatsConnection } from '@nats-io/transport-node';
import selfsigned from 'selfsigned';
import { connectNats, type NatsServer } from '../../src/invocation/nats.ts';
import { freePort } from './wait.ts';

export const NATS_SERVER = process.env.SVC_TEST_NATS_SERVER ?? '/usr/sbin/nats-server';

let said = false;

/** Whether nats-server is here; in CI its absence is an error, elsewhere one line says what is skipped. */
export function natsServerAvailable(): boolean {
  if (existsSync(NATS_SERVER)) return true;
  if (process.env.CI) throw new Error(`nats-server is required in CI at ${NATS_SERVER} (Debian package nats-server)`);
  if (!said) console.log(`# skipping NATS tests: install nats-server (Debian package nats-server) for ${NATS_SERVER}`);
  said = true;
  return false;
}

export interface NatsServerOptions {
  /** How the installation's replicas prove who they are (default a user and password; creds: operator mode). */
  auth?: 'password' | 'token' | 'nkey' | 'creds';
  /** tls:// with a CA of the test's own; the server verifies client certificates too (unless `clientCertificates: false`). */
  tls?: boolean;
  /** With tls: further IP addresses the server's certificate is for, besides 127.0.0.1 (clients reaching it through a forwarder). */
  tlsAddresses?: string[];
  /** With tls: whether the server demands a client certificate (default true); without, replicas bring none. */
  clientCertificates?: boolean;
  /** The server's monitoring port (HTTP, loopback): `messages()` reads its counters. */
  monitor?: boolean;
}

export interface TestNats {
  /** What a replica of the installation connects with: URL, credentials, TLS files. */
  settings: NatsServer;
  /** The same as `svc serve`'s environment. */
  env: Record<string, string>;
  /** The CA that signed the server's certificate (with tls). */
  caFile?: string;
  /** A client of its own: the installation's settings with `changes` (say, another prefix, or no credentials). */
  connect(changes?: Partial<NatsServer>): Promise<NatsConnection>;
  /** Messages the server has taken in from clients and sent out to them since it started (needs `monitor`). */
  messages(): Promise<{ in: number; out: number }>;
  /** The server's process id (a bench reads its CPU time). */
  pid: number;
  /** Stops the server, runs `whileDown`, and starts it again on the same port and store, as an operator's restart does. */
  restart(whileDown?: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

const quote = (text: string) => JSON.stringify(text);

export async function startNats(options: NatsServerOptions = {}): Promise<TestNats> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'svc-nats-'));
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    writeFileSync(file, text, { mode: 0o600 });
    return file;
  };
  const secret = randomBytes(18).toString('base64url');
  const settings: NatsServer = { natsUrl: '', natsPrefix: 'svc', natsTlsInsecure: false, natsReplicas: 1 };
  let auth: string;
  switch (options.auth ?? 'password') {
    case 'password':
      Object.assign(settings, { natsUser: 'svc', natsPassword: secret });
      auth = `accounts { SVC { jetstream: enabled, users: [{ user: "svc", password: ${quote(secret)} }] } }`;
      break;
    case 'nkey': {
      const user = nkeys.createUser();
      settings.natsNkeySeedFile = write('svc.nk', new TextDecoder().decode(user.getSeed()));
      auth = `accounts { SVC { jetstream: enabled, users: [{ nkey: ${quote(user.getPublicKey())} }] } }`;
      break;
    }
    case 'token':
      settings.natsToken = secret;
      auth = `authorization { token: ${quote(secret)} }`;
      break;
    case 'creds': {
      const trust = operatorMode();
      settings.natsCredsFile = write('svc.creds', trust.creds);
      auth = trust.config;
      break;
    }
  }
  const pki = options.tls ? await makePki(write, options.tlsAddresses ?? []) : undefined;
  const verifyClients = options.clientCertificates ?? true;
  const monitorPort = options.monitor ? await freePort() : undefined;
  if (pki) Object.assign(settings, { natsTlsCaFile: pki.caFile }, verifyClients ? { natsTlsCertFile: pki.clientCert, natsTlsKeyFile: pki.clientKey } : {});
  const config = write('nats.conf', [
    'listen: "127.0.0.1:-1"',
    `jetstream { store_dir: ${quote(path.join(dir, 'js'))}, max_memory_store: 64MB, max_file_store: 1GB }`,
    auth,
    monitorPort ? `http: "127.0.0.1:${monitorPort}"` : '',
    pki ? `tls { cert_file: ${quote(pki.serverCert)}, key_file: ${quote(pki.serverKey)}, ca_file: ${quote(pki.caFile)}, verify: ${verifyClients} }` : '',
  ].join('\n'));

  const logFile = path.join(dir, 'nats.log');
  let server = await spawnServer(config, logFile);
  const port = server.port;
  // A restart listens where the replicas reconnect to, and keeps the file store (streams, buckets).
  writeFileSync(config, readFileSync(config, 'utf8').replace('listen: "127.0.0.1:-1"', `listen: "127.0.0.1:${port}"`));
  settings.natsUrl = `${pki ? 'tls' : 'nats'}://127.0.0.1:${port}`;
  const env = Object.fromEntries(Object.entries({
    SVC_NATS_URL: settings.natsUrl, SVC_NATS_USER: settings.natsUser, SVC_NATS_PASSWORD: settings.natsPassword, SVC_NATS_TOKEN: settings.natsToken,
    SVC_NATS_NKEY_SEED_FILE: settings.natsNkeySeedFile, SVC_NATS_CREDS_FILE: settings.natsCredsFile, SVC_NATS_TLS_CA_FILE: settings.natsTlsCaFile,
    SVC_NATS_TLS_CERT_FILE: settings.natsTlsCertFile, SVC_NATS_TLS_KEY_FILE: settings.natsTlsKeyFile,
  }).filter((entry): entry is [string, string] => entry[1] !== undefined));

  const connect = (changes: Partial<NatsServer> = {}) => connectNats({ ...settings, ...changes });
  return {
    settings,
    env,
    caFile: pki?.caFile,
    connect,
    get pid() { return server.child.pid!; },
    async messages() {
      if (!monitorPort) throw new Error('startNats({ monitor: true }) serves the counters');
      const varz = await (await fetch(`http://127.0.0.1:${monitorPort}/varz`)).json() as { in_msgs: number; out_msgs: number };
      return { in: varz.in_msgs, out: varz.out_msgs };
    },
    async restart(whileDown) {
      await server.stop();
      await whileDown?.();
      server = await spawnServer(config, logFile);
    },
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** nats-server on `config`, once it listens; killed when the test process exits. */
async function spawnServer(config: string, logFile: string): Promise<{ child: ChildProcess; port: string; stop(): Promise<void> }> {
  const logged = () => readFileSync(logFile, 'utf8');
  const from = existsSync(logFile) ? logged().length : 0;
  const child = spawn(NATS_SERVER, ['-c', config], { stdio: ['ignore', 'ignore', openSync(logFile, 'a')] });
  const stopOnExit = () => child.kill('SIGKILL');
  process.once('exit', stopOnExit);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  let port: string | undefined;
  for (let waited = 0; !port; waited += 20) {
    if (child.exitCode !== null || waited > 10_000) throw new Error(`nats-server did not start: ${logged().slice(from)}`);
    await sleep(20);
    port = /Listening for client connections on 127\.0\.0\.1:(\d+)/.exec(logged().slice(from))?.[1];
  }
  return {
    child,
    port,
    async stop() {
      process.off('exit', stopOnExit);
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** A JWT of the NATS kind `claims.type`, issued by `issuer` about `subject`. */
function natsJwt(issuer: nkeys.KeyPair, subject: string, claims: Record<string, unknown>): string {
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const signed = `${part({ typ: 'JWT', alg: 'ed25519-nkey' })}.${part({
    jti: randomBytes(16).toString('hex'), iat: Math.floor(Date.now() / 1000), iss: issuer.getPublicKey(), name: 'svc', sub: subject,
    nats: { ...claims, version: 2 },
  })}`;
  return `${signed}.${Buffer.from(issuer.sign(new TextEncoder().encode(signed))).toString('base64url')}`;
}

/**
 * A server in operator mode (what a .creds file is for): an operator, a system account, the installation's
 * account with JetStream, and a user of it whose JWT and seed make the .creds file.
 */
function operatorMode(): { config: string; creds: string } {
  const [operator, system, account, user] = [nkeys.createOperator(), nkeys.createAccount(), nkeys.createAccount(), nkeys.createUser()];
  const unlimited = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 };
  const accounts = {
    [system.getPublicKey()]: natsJwt(operator, system.getPublicKey(), { type: 'account', limits: unlimited }),
    [account.getPublicKey()]: natsJwt(operator, account.getPublicKey(), {
      type: 'account', limits: { ...unlimited, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 },
    }),
  };
  const userJwt = natsJwt(account, user.getPublicKey(), { type: 'user', pub: {}, sub: {}, subs: -1, data: -1, payload: -1 });
  return {
    config: [
      `operator: ${quote(natsJwt(operator, operator.getPublicKey(), { type: 'operator' }))}`,
      'resolver: MEMORY',
      `system_account: ${system.getPublicKey()}`,
      `resolver_preload: { ${Object.entries(accounts).map(([key, jwt]) => `${key}: ${quote(jwt)}`).join(', ')} }`,
    ].join('\n'),
    creds: `-----BEGIN NATS USER JWT-----\n${userJwt}\n------END NATS USER JWT------\n\n`
      + `-----BEGIN USER NKEY SEED-----\n${new TextDecoder().decode(user.getSeed())}\n------END USER NKEY SEED------\n`,
  };
}

/** A CA, the server's certificate for 127.0.0.1 (and `addresses`) and a client certificate, all as files. */
async function makePki(write: (name: string, text: string) => string, addresses: string[]) {
  const base = { keyType: 'ec', algorithm: 'sha256' } as const;
  const ca = await selfsigned.generate([{ name: 'commonName', value: 'svc test NATS CA' }], {
    ...base, extensions: [{ name: 'basicConstraints', cA: true, critical: true }, { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true }],
  });
  const leaf = (name: string, usage: { serverAuth?: boolean; clientAuth?: boolean }) => selfsigned.generate([{ name: 'commonName', value: name }], {
    ...base, ca: { cert: ca.cert, key: ca.private },
    extensions: [
      { name: 'basicConstraints', cA: false }, { name: 'keyUsage', digitalSignature: true, critical: true }, { name: 'extKeyUsage', ...usage },
      { name: 'subjectAltName', altNames: ['127.0.0.1', ...addresses].map((ip) => ({ type: 7, ip })) },
    ],
  });
  const [server, client] = await Promise.all([leaf('127.0.0.1', { serverAuth: true }), leaf('svc replica', { clientAuth: true })]);
  return {
    caFile: write('ca.pem', ca.cert),
    serverCert: write('server.pem', server.cert), serverKey: write('server.key', server.private),
    clientCert: write('client.pem', client.cert), clientKey: write('client.key', client.private),
  };
}

export interface TestNatsCluster {
  /** What a replica connects with: the first server's URL (the client learns the others from it) and credentials. */
  settings: NatsServer;
  env: Record<string, string>;
  connect(): Promise<NatsConnection>;
  /** kill -9 of one server of the cluster. */
  kill(server: number): void;
  stop(): Promise<void>;
}

/**
 * `size` nats-servers in one JetStream cluster on loopback, with a user and password as startNats has;
 * resolves once JetStream has a meta leader (streams can be made).
 */
export async function startNatsCluster(size: number): Promise<TestNatsCluster> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'svc-nats-cluster-'));
  const secret = randomBytes(18).toString('base64url');
  const clientPorts = await Promise.all(Array.from({ length: size }, freePort));
  const routePorts = await Promise.all(Array.from({ length: size }, freePort));
  const servers = await Promise.all(clientPorts.map((port, i) => {
    const config = path.join(dir, `n${i}.conf`);
    writeFileSync(config, [
      `server_name: n${i}`,
      `listen: "127.0.0.1:${port}"`,
      `jetstream { store_dir: ${quote(path.join(dir, `js${i}`))}, max_memory_store: 64MB, max_file_store: 1GB }`,
      `accounts { SVC { jetstream: enabled, users: [{ user: "svc", password: ${quote(secret)} }] } }`,
      `cluster { name: svc, listen: "127.0.0.1:${routePorts[i]}", routes: [${routePorts.filter((_, j) => j !== i).map((p) => quote(`nats-route://127.0.0.1:${p}`)).join(', ')}] }`,
    ].join('\n'), { mode: 0o600 });
    return spawnServer(config, path.join(dir, `n${i}.log`));
  }));
  const settings: NatsServer = {
    natsUrl: `nats://127.0.0.1:${clientPorts[0]}`, natsPrefix: 'svc', natsTlsInsecure: false, natsReplicas: size, natsUser: 'svc', natsPassword: secret,
  };
  const connect = () => connectNats(settings);
  const nc = await connect();
  try {
    // jetstreamManager asks JetStream for the account, which answers once the cluster has a meta leader.
    for (const started = Date.now(); !(await jetstreamManager(nc, { timeout: 1000 }).then(() => true, () => false));) {
      if (Date.now() - started > 20_000) throw new Error('the NATS cluster elected no JetStream leader in 20 s');
      await sleep(200);
    }
  } finally {
    await nc.close();
  }
  return {
    settings,
    env: { SVC_NATS_URL: settings.natsUrl, SVC_NATS_USER: 'svc', SVC_NATS_PASSWORD: secret, SVC_NATS_REPLICAS: String(size) },
    connect,
    kill: (server) => { servers[server]!.child.kill('SIGKILL'); },
    async stop() {
      await Promise.all(servers.map((server) => server.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
