// The NATS server the API replicas share: a connection with the installation's credentials and TLS
// (settings.ts), the names its prefix gives every bucket and subject the platform makes there, and how a
// bucket is made.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { connect, credsAuthenticator, nkeyAuthenticator, nkeys, type NatsConnection, type NodeConnectionOptions, type TlsOptions } from '@nats-io/transport-node';
import type { JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { natsEnvSettings, type NatsSettings } from './settings.ts';

export type NatsServer = NatsSettings & { natsUrl: string };

/** One installation's names on the server: `svc` keeps those of releases before the prefix. */
export function natsNames(prefix: string) {
  return {
    bucket: (name: 'ready' | 'slots' | 'rates') => `${prefix}_${name}`,
    replica: (replicaId: string, exchange: 'ping') => `${prefix}.replica.${replicaId}.${exchange}`,
    done: (requestId: string) => `${prefix}.done.${requestId}`,
    stage: `${prefix}.stage`,
    /** Logs asked of the placement replica (control/logs/relay.ts); answers on logs.<uuid>. */
    logs: `${prefix}.logs`,
    /** A version's streaming sessions asked of the placement replica (streaming/sessions-relay.ts). */
    sessions: `${prefix}.sessions`,
    /** Agent links relayed to the placement lease's holder (control/agents/relay.ts). */
    agents: `${prefix}.agents`,
    /** The streams of the release before's ticket queues (one per version, and its heads bucket), deleted at start. */
    formerTicketQueues: {
      ticketStream: new RegExp(`^${prefix.toUpperCase()}_Q_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`),
      headsBucketStream: `KV_${prefix}_heads`,
    },
    /** Replies come here: a server's permissions can give each installation its own. */
    inbox: `_INBOX_${prefix}`,
  };
}

export type NatsNames = ReturnType<typeof natsNames>;

/** `setting (VARIABLE)`, as configuration errors name a setting. */
export function named(key: keyof NatsSettings): string {
  const variable = Object.keys(natsEnvSettings).find((name) => natsEnvSettings[name] === key);
  return `invocation.${key} (${variable})`;
}

function read(key: keyof NatsSettings, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new Error(`${named(key)}: cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

function nkeySeed(file: string): Uint8Array {
  const seed = new TextEncoder().encode(read('natsNkeySeedFile', file).toString('utf8').trim());
  try {
    nkeys.fromSeed(seed);
  } catch {
    throw new Error(`${named('natsNkeySeedFile')}: ${file} holds no nkey seed`);
  }
  return seed;
}

/** What `connect` needs; the files named by the settings are read here, so a bad one fails with one line naming it. */
export function connectionOptions(settings: NatsServer): NodeConnectionOptions {
  const url = new URL(settings.natsUrl);
  const options: NodeConnectionOptions = { servers: url.host, inboxPrefix: natsNames(settings.natsPrefix).inbox };
  if (settings.natsUser) Object.assign(options, { user: settings.natsUser, pass: settings.natsPassword });
  if (settings.natsToken) options.token = settings.natsToken;
  if (settings.natsNkeySeedFile) options.authenticator = nkeyAuthenticator(nkeySeed(settings.natsNkeySeedFile));
  if (settings.natsCredsFile) options.authenticator = credsAuthenticator(new Uint8Array(read('natsCredsFile', settings.natsCredsFile)));
  if (url.protocol === 'tls:') {
    // Passed on to tls.connect, which takes rejectUnauthorized and host though nats.js does not declare them.
    const tls: TlsOptions & { rejectUnauthorized?: boolean; host?: string } = {};
    if (settings.natsTlsCaFile) tls.ca = read('natsTlsCaFile', settings.natsTlsCaFile).toString('utf8');
    if (settings.natsTlsCertFile) tls.cert = read('natsTlsCertFile', settings.natsTlsCertFile).toString('utf8');
    if (settings.natsTlsKeyFile) tls.key = read('natsTlsKeyFile', settings.natsTlsKeyFile).toString('utf8');
    if (settings.natsTlsInsecure) tls.rejectUnauthorized = false;
    // nats.js names no server for an IP address, and Node would then check the certificate against localhost.
    if (isIP(url.hostname)) tls.host = url.hostname;
    options.tls = tls;
  }
  return options;
}

/** Connects, or fails with one line naming the URL (or the setting whose file is unusable). */
export async function connectNats(settings: NatsServer, extra: NodeConnectionOptions = {}): Promise<NatsConnection> {
  const options = connectionOptions(settings);
  try {
    return await connect({ ...options, timeout: 3000, ...extra });
  } catch (error) {
    throw new Error(`cannot reach NATS at ${settings.natsUrl}: ${(error as Error).message}`);
  }
}

/**
 * A KV bucket of the platform, made with `replicas` copies or bound as it is; one made with another count of
 * copies (or with entries that expire, as an older release made some) is brought in line. With the
 * count of copies the server keeps (a single server keeps one, whatever is asked).
 */
export async function openBucket(nc: NatsConnection, jsm: JetStreamManager, name: string, replicas: number): Promise<{ kv: KV; kept: number }> {
  const kvm = new Kvm(nc);
  // A single server refuses a bucket of more than one copy: it is made with one there.
  const kv = await kvm.create(name, { history: 1, replicas }).catch((error: Error) => {
    if (!/non-clustered/i.test(error.message)) throw error;
    return kvm.create(name, { history: 1, replicas: 1 });
  });
  const stream = `KV_${name}`;
  let info = await jsm.streams.info(stream);
  const wanted = info.cluster ? replicas : 1;
  if (info.config.num_replicas !== wanted || info.config.max_age !== 0) info = await jsm.streams.update(stream, { ...info.config, num_replicas: wanted, max_age: 0 });
  return { kv, kept: info.cluster ? info.config.num_replicas : 1 };
}
