// Foundation commands: run the platform, obtain credentials, administer accounts.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { loadConfig } from '../../config.ts';
import { createSettingsRepo } from '../../control/installation/repo.ts';
import { loadSecretBox, sealedSecret, unusedBootstrapSecret } from '../../control/installation/service.ts';
import type { SettingsRepo } from '../../control/installation/repo.ts';
import type { SecretBox } from '../../store/encryption.ts';
import { openDatabase } from '../../database.ts';
import { accountListResponse, accountResponse } from '../../control/accounts/schema.ts';
import { keySchema } from '../../control/keys/schema.ts';
import { ADMIN_ISSUER, loadAdminKey, signJwt } from '../../control/keys/signing.ts';
import { functionKeyScopes, taskKeyScopes } from '../../domain/scopes.ts';
import { runAgent } from '../../roles/agent.ts';
import { serve as runServe } from '../../roles/serve.ts';
import { call, CliError } from '../client.ts';
import { fields, parseDuration, table } from '../format.ts';
import type { Command, CommandContext } from '../command.ts';
import { saveState } from '../state.ts';

const serve: Command = {
  summary: 'Run the whole platform (gateway, API, key service, local agent) on this machine',
  usage: '[--samples]',
  role: true,
  options: { samples: { type: 'boolean', default: false } },
  async run({ env, values }) {
    await runServe(loadConfig(env), { samples: values.samples === true, env });
  },
};

const agent: Command = {
  summary: 'Run a worker agent for a registered cluster (SVC_AGENT_SERVER, SVC_AGENT_CREDENTIAL)',
  usage: '[--server URL] [--credential svcagent-…]',
  role: true,
  options: { credential: { type: 'string' } },
  async run({ env, values }) {
    const config = loadConfig(env);
    const server = (values.server as string | undefined) ?? config.compute.agent.server;
    const credential = (values.credential as string | undefined) ?? config.compute.agent.credential;
    if (!server || !credential) throw new CliError('an agent needs SVC_AGENT_SERVER and SVC_AGENT_CREDENTIAL (from `svc cluster register`)');
    await runAgent(config, { server, credential });
  },
};

const init: Command = {
  summary: 'Obtain a management token (SVC_TOKEN) with the bootstrap secret (it works once) or an admin token, and save it',
  usage: '[--secret <bootstrap secret>] [--account <ncaId>] [--gateway-address <domain>]',
  options: { secret: { type: 'string' }, account: { type: 'string' }, 'gateway-address': { type: 'string' } },
  async run({ values, env, state, print }) {
    if (typeof values['gateway-address'] === 'string') state.gatewayAddress = values['gateway-address'];
    // Once the bootstrap secret is spent: an account-administration token, given or signed with the key here.
    const bearer = (values.secret as string | undefined) ?? env.SVC_BOOTSTRAP_SECRET ?? env.SVC_ADMIN_TOKEN
      ?? (existsSync(adminKeyFile(env)) ? (await mintAdminToken(env, 300)).token : await prompt('Bootstrap secret: '));
    if (!bearer) throw new CliError('a bootstrap secret (--secret, SVC_BOOTSTRAP_SECRET) or an admin token (SVC_ADMIN_TOKEN, or the admin signing key on this machine) is required');
    const body = values.account ? { ncaId: values.account } : {};
    const token = await call(state, 'keys', 'POST', '/v1/admin/keys', keySchema, { bearer, body });
    saveState(env, { server: state.server, gatewayAddress: state.gatewayAddress, token: token.value, tokenExpiresAt: token.expires_at });
    print(`Management token saved for account ${token.nca_id} (expires ${token.expires_at})`, token);
  },
};

const generateKey: Command = {
  summary: 'Create an API key (SVC_API_KEY, or SVC_TASK_API_KEY with --task) and save it',
  usage: '[--task] [--scopes a,b] [--expires-in 30d] [--description text]',
  options: {
    task: { type: 'boolean', default: false },
    scopes: { type: 'string' },
    'expires-in': { type: 'string', default: '30d' },
    description: { type: 'string' },
  },
  async run({ values, env, state, print }) {
    if (!state.token) throw new CliError('no management token: run `svc init` first (or set SVC_TOKEN)');
    const task = values.task === true;
    const scopes = typeof values.scopes === 'string'
      ? values.scopes.split(',').map((scope) => scope.trim()).filter(Boolean)
      : [...(task ? taskKeyScopes : functionKeyScopes)];
    const seconds = parseDuration(values['expires-in'] as string, '--expires-in');
    const expiresAt = new Date(Date.now() + seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    const serviceId = env.SVC_KEYS_SERVICE_ID ?? 'svc-api';
    const key = await call(state, 'keys', 'POST', '/v1/keys', keySchema, {
      bearer: state.token,
      headers: {
        'key-issuer-service': task ? 'svct-api' : 'svc-api',
        'key-issuer-id': serviceId,
        'key-owner-id': env.USER ? `${env.USER}@svc-cli` : 'svc-cli',
      },
      body: {
        description: (values.description as string | undefined) ?? (task ? 'task key' : 'function key'),
        expires_at: expiresAt,
        audience_service_ids: [serviceId],
        authorizations: {
          policies: [{
            aud: serviceId, auds: [serviceId], product: task ? 'svc-cloud-tasks' : 'svc-cloud-functions',
            resources: task ? [{ id: '*', type: 'account-tasks' }]
              : [{ id: '*', type: 'account-functions' }, { id: '*', type: 'authorized-functions' }],
            scopes,
          }],
        },
      },
    });
    saveState(env, task ? { taskApiKey: key.value } : { apiKey: key.value });
    print(`${key.type} saved (expires ${key.expires_at}):\n${key.value}`, key);
  },
};

/** The admin signing key this machine can read: SVC_ADMIN_SIGNING_KEY_FILE or the data directory's. */
function adminKeyFile(env: NodeJS.ProcessEnv): string {
  return env.SVC_ADMIN_SIGNING_KEY_FILE ?? path.join(path.resolve(env.SVC_DATA_DIR ?? './data'), 'admin-signing-key.pem');
}

async function mintAdminToken(env: NodeJS.ProcessEnv, lifetimeSeconds: number): Promise<{ token: string; expiresAt: Date }> {
  const file = adminKeyFile(env);
  if (!existsSync(file)) throw new CliError(`admin signing key ${file} not found (set SVC_ADMIN_SIGNING_KEY_FILE)`);
  const key = await loadAdminKey(file, { create: false });
  const expiresAt = new Date(Date.now() + lifetimeSeconds * 1000);
  const token = await signJwt(key, {
    iss: ADMIN_ISSUER, aud: env.SVC_KEYS_SERVICE_ID ?? 'svc-api', sub: env.USER ?? 'svc-admin', scope: 'account_setup',
  }, expiresAt);
  return { token, expiresAt };
}

const metricsToken: Command = {
  summary: 'Print the bearer GET /metrics wants (metrics.token, or the one generated for a gateway off loopback)',
  async run({ env, print }) {
    const config = loadConfig(env);
    const token = config.metrics.token ?? await withSealedSettings(config, (settings, box) => sealedSecret(settings, box, 'metrics.token'));
    if (!token) throw new CliError('no /metrics token: none is configured (SVC_METRICS_TOKEN) and none was generated (the gateway listened on loopback only)');
    print(token, { token });
  },
};

const bootstrapSecret: Command = {
  summary: 'Print the bootstrap secret while it works (unused, under 24 h old); `svc serve` off loopback does not',
  async run({ env, print }) {
    const unused = await withSealedSettings(loadConfig(env), (settings, box) => unusedBootstrapSecret(settings, box, new Date()));
    if (!unused) throw new CliError('no bootstrap secret works: it was used or has expired (docs/security.md says how to make a new one)');
    print(`${unused.secret}   until ${unused.expiresAt}`, unused);
  },
};

/** Reads sealed settings from the store, with the secrets key (on the platform's host, as its operator). */
async function withSealedSettings<T>(config: ReturnType<typeof loadConfig>, read: (settings: SettingsRepo, box: SecretBox) => Promise<T>): Promise<T> {
  const store = await openDatabase(config.store);
  try {
    const settings = createSettingsRepo(store.db);
    return await read(settings, await loadSecretBox(settings, { ...config.secrets, dataDir: config.store.dataDir, now: new Date().toISOString() }));
  } finally {
    await store.close();
  }
}

const adminToken: Command = {
  summary: 'Sign an account-administration token with the admin signing key (default lifetime 3600 s)',
  usage: '[--expires-in 3600s]',
  options: { 'expires-in': { type: 'string', default: '3600s' } },
  async run({ values, env, print }) {
    const { token, expiresAt } = await mintAdminToken(env, parseDuration(values['expires-in'] as string, '--expires-in'));
    print(token, { token, expiresAt: expiresAt.toISOString() });
  },
};

/** Account commands use SVC_ADMIN_TOKEN, else a short token from the local admin key, else a saved key. */
async function adminBearer({ env, state }: CommandContext): Promise<string> {
  if (env.SVC_ADMIN_TOKEN) return env.SVC_ADMIN_TOKEN;
  if (existsSync(adminKeyFile(env))) return (await mintAdminToken(env, 300)).token;
  const saved = state.token ?? state.apiKey;
  if (!saved) throw new CliError('no admin credential: set SVC_ADMIN_TOKEN or SVC_ADMIN_SIGNING_KEY_FILE');
  return saved;
}

const limitFlags = {
  'max-functions': 'maxFunctionsAllowed',
  'max-tasks': 'maxTasksAllowed',
  'max-telemetries': 'maxTelemetriesAllowed',
  'max-registry-credentials': 'maxRegistryCredentialsAllowed',
  'max-instances': 'maxInstancesAllowed',
  'max-assets': 'maxAssetsAllowed',
  'max-asset-bytes': 'maxAssetBytesAllowed',
} as const;

const limitColumns = ['ncaId', 'name', ...Object.values(limitFlags)];

function accountId(context: CommandContext): string {
  return context.positionals[0] ?? context.env.SVC_ACCOUNT_ID ?? 'svc-default';
}

const accountGet: Command = {
  summary: 'Show an account and its limits',
  usage: '[ncaId]',
  async run(context) {
    const { account } = await call(context.state, 'api', 'GET', `/v2/svc/accounts/${encodeURIComponent(accountId(context))}`, accountResponse, {
      bearer: await adminBearer(context),
    });
    context.print(fields(account), { account });
  },
};

const accountList: Command = {
  summary: 'List accounts',
  async run(context) {
    const { accounts } = await call(context.state, 'api', 'GET', '/v2/svc/accounts', accountListResponse, {
      bearer: await adminBearer(context),
    });
    context.print(table(accounts, limitColumns), { accounts });
  },
};

const accountSetLimits: Command = {
  summary: 'Change account limits (only the flags given change)',
  usage: '[ncaId] [--max-functions N] [--max-tasks N] [--max-telemetries N] [--max-registry-credentials N] [--max-instances N] [--max-assets N] [--max-asset-bytes N]',
  options: Object.fromEntries(Object.keys(limitFlags).map((flag) => [flag, { type: 'string' as const }])),
  async run(context) {
    const body: Record<string, number> = {};
    for (const [flag, field] of Object.entries(limitFlags)) {
      const value = context.values[flag];
      if (typeof value !== 'string') continue;
      if (!/^\d+$/.test(value)) throw new CliError(`--${flag} must be a whole number`);
      body[field] = Number(value);
    }
    if (Object.keys(body).length === 0) throw new CliError(`give at least one of ${Object.keys(limitFlags).map((f) => `--${f}`).join(', ')}`);
    const { account } = await call(context.state, 'api', 'PATCH', `/v2/svc/accounts/${encodeURIComponent(accountId(context))}`, accountResponse, {
      bearer: await adminBearer(context), body,
    });
    context.print(fields(account), { account });
  },
};

const accountCreate: Command = {
  summary: 'Create an account (installation administrators only)',
  usage: '<ncaId> [--name text]',
  options: { name: { type: 'string' } },
  async run(context) {
    const ncaId = context.positionals[0];
    if (!ncaId) throw new CliError('give the new account id');
    const { account } = await call(context.state, 'api', 'POST', `/v2/svc/accounts/${encodeURIComponent(ncaId)}`, accountResponse, {
      bearer: await adminBearer(context), body: context.values.name ? { name: context.values.name } : {},
    });
    context.print(fields(account), { account });
  },
};

async function prompt(question: string): Promise<string | undefined> {
  if (!process.stdin.isTTY) return undefined;
  const readline = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await readline.question(question)).trim() || undefined;
  } finally {
    readline.close();
  }
}

export const foundationCommands: Record<string, Command> = {
  serve,
  agent,
  init,
  'api-key generate': generateKey,
  'admin token': adminToken,
  'metrics token': metricsToken,
  'bootstrap secret': bootstrapSecret,
  'account get': accountGet,
  'account list': accountList,
  'account create': accountCreate,
  'account set-limits': accountSetLimits,
};
