// The NATS server several API replicas share: where it is, how a replica proves who it is, TLS, and the
// prefix that keeps one installation's streams, buckets and subjects apart from another's on the same
// server. One zod schema for config.ts to mount under `invocation`. Secrets come from the environment or
// files, never the URL (which is logged); the files are read when the platform connects (nats.ts).
import { z } from 'zod';

/** Only `true` or `false`: a setting that turns a check off is never on by a typo. */
const onOff = z.preprocess((value) => ({ true: true, false: false }[String(value)] ?? value), z.boolean());
const file = z.string().min(1);
const replicasRule = 'must be a whole number from 1 to 5 (JetStream keeps at most 5 copies)';

export const natsSettingsSchema = z.object({
  /**
   * NATS JetStream shared by several API replicas on one PostgreSQL (docs/architecture.md); without it
   * the queue lives in this process (one replica). tls:// requires TLS.
   */
  natsUrl: z.string().regex(/^(nats|tls):\/\/[^\s/:@]+(:\d{1,5})?\/?$/, 'must be nats://host[:port] or tls://host[:port]').optional(),
  /** Starts every stream, consumer, KV bucket and subject this installation makes on the server. */
  natsPrefix: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'must be 1-32 of a-z, 0-9, _ and -, starting with a letter or digit').default('svc'),
  natsUser: z.string().min(1).optional(),
  natsPassword: z.string().min(1).optional(),
  natsToken: z.string().min(1).optional(),
  /** A file holding an nkey user seed (SU…). */
  natsNkeySeedFile: file.optional(),
  /** A .creds file (user JWT and seed) of a server in operator mode. */
  natsCredsFile: file.optional(),
  /** PEM CA bundle the server's certificate must chain to (default: the system's roots). */
  natsTlsCaFile: file.optional(),
  /** Client certificate and key (PEM), for a server that verifies clients. */
  natsTlsCertFile: file.optional(),
  natsTlsKeyFile: file.optional(),
  /** Development only: accept any server certificate. */
  natsTlsInsecure: onOff.default(false),
  /**
   * Copies JetStream keeps of every stream and KV bucket the platform makes (a NATS cluster's servers;
   * a single server keeps 1). Applied to existing ones at start too.
   */
  natsReplicas: z.coerce.number({ error: replicasRule }).int(replicasRule).min(1, replicasRule).max(5, replicasRule).default(1),
});

export type NatsSettings = z.infer<typeof natsSettingsSchema>;

/** Environment variables a config loader can map onto these settings (relative to the mount point). */
export const natsEnvSettings: Record<string, keyof NatsSettings> = {
  SVC_NATS_URL: 'natsUrl',
  SVC_NATS_PREFIX: 'natsPrefix',
  SVC_NATS_USER: 'natsUser',
  SVC_NATS_PASSWORD: 'natsPassword',
  SVC_NATS_TOKEN: 'natsToken',
  SVC_NATS_NKEY_SEED_FILE: 'natsNkeySeedFile',
  SVC_NATS_CREDS_FILE: 'natsCredsFile',
  SVC_NATS_TLS_CA_FILE: 'natsTlsCaFile',
  SVC_NATS_TLS_CERT_FILE: 'natsTlsCertFile',
  SVC_NATS_TLS_KEY_FILE: 'natsTlsKeyFile',
  SVC_NATS_TLS_INSECURE: 'natsTlsInsecure',
  SVC_NATS_REPLICAS: 'natsReplicas',
};

/** The rules between the settings: one kind of credential, pairs given together, TLS files only with tls://. */
export function checkNatsSettings(settings: NatsSettings, ctx: z.RefinementCtx) {
  const problem = (key: keyof NatsSettings, message: string) => ctx.addIssue({ code: 'custom', path: [key], message });
  if (Boolean(settings.natsUser) !== Boolean(settings.natsPassword)) {
    problem(settings.natsUser ? 'natsPassword' : 'natsUser', 'natsUser and natsPassword go together');
  }
  const given = (['natsUser', 'natsToken', 'natsNkeySeedFile', 'natsCredsFile'] as const).filter((key) => settings[key]);
  if (given.length > 1) problem(given[1], `one NATS credential (user and password, a token, an nkey seed file or a creds file), not ${given.join(' and ')}`);
  if (Boolean(settings.natsTlsCertFile) !== Boolean(settings.natsTlsKeyFile)) {
    problem(settings.natsTlsCertFile ? 'natsTlsKeyFile' : 'natsTlsCertFile', 'natsTlsCertFile and natsTlsKeyFile go together');
  }
  const tlsSet = settings.natsTlsCaFile || settings.natsTlsCertFile || settings.natsTlsInsecure;
  if (tlsSet && !settings.natsUrl?.startsWith('tls://')) problem('natsUrl', 'the natsTls* settings need a tls:// URL');
}
