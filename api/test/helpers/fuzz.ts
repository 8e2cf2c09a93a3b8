// A small fuzzer of the management API: a valid request to a create or update endpoint with one value, key,
// path parameter, query value or header replaced by something odd (NUL, lone surrogates, control and
// direction characters, very long strings, deeply nested JSON). It counts the answers' statuses; the
// platform must answer none of them 5xx, and every 4xx as problem+json. api/test/hardening.test.ts runs
// it briefly, bench/fuzz/run.ts for as long as asked.
import http from 'node:http';
import type { TestPlatform } from './platform.ts';

/** What the fuzzer needs of a running platform: its address and a credential of each kind. */
export interface FuzzTarget {
  url: string;
  hosts: { api: string; keys: string };
  token: string;
  taskKey: string;
  adminToken: string;
  /** A function version and a task to update. */
  functionId: string;
  versionId: string;
  taskId: string;
}

export interface FuzzReport {
  /** How many answers had each status. */
  statuses: Map<number, number>;
  /** Requests answered 5xx, or 4xx without problem+json (the first 20). */
  failures: string[];
}

interface Case {
  method: string;
  path: string;
  host: 'api' | 'keys';
  bearer: string;
  body?: unknown;
  query?: Record<string, string>;
  headers?: Record<string, string>;
}

/** A seeded random source (mulberry32): a run can be repeated with its seed. */
function randomSource(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const below = (n: number) => Math.floor(next() * n);
  return { below, pick: <T>(items: readonly T[]): T => items[below(items.length)] };
}

type Random = ReturnType<typeof randomSource>;

const ODD_PIECES = [
  '\u0000', 'a\u0000b', '\ud800', 'x\udfffy', '\udc00\ud800', '\u202e', '\ufeff', '\u0001\u001f\u007f', '\r\n', '\t',
  '😀', 'é', '\u0085', '%00', '%', '../..', "'; drop table accounts; --", '${x}', '{{x}}', '\\', '"', '',
] as const;

/** An odd string: a few odd pieces around plain text, sometimes very long. */
function oddString(random: Random): string {
  const parts: string[] = [];
  for (let i = 1 + random.below(3); i > 0; i--) parts.push(random.pick(ODD_PIECES), random.pick(['', 'name', 'x']));
  if (random.below(8) === 0) parts.push('y'.repeat(random.pick([300, 5000, 70_000, 400_000])));
  return parts.join('');
}

/** Strings that an HTTP client can put in a header (no NUL, CR or LF), odd all the same. */
function oddHeader(random: Random): string {
  return random.pick(['%00', '\u00ff\u00fe', 'x'.repeat(20_000), '\t x \t', '../..', "'", '\u0080']);
}

function oddValue(random: Random): unknown {
  switch (random.below(6)) {
    case 0: return deep(random);
    case 1: return random.pick([-1, 1e308, 2 ** 53 + 1, 0.5, true, null, [], {}]);
    case 2: return { [oddString(random)]: oddString(random) };
    default: return oddString(random);
  }
}

/** JSON text put into a body as it is (JSON.stringify would overflow its stack on it). */
class RawJson {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

/** Arrays or objects nested up to 200,000 deep (the JSON body limit cuts the deepest). */
function deep(random: Random): RawJson {
  const depth = random.pick([64, 1000, 20_000, 200_000]);
  const [open, close] = random.pick([['[', ']'], ['{"a":', '}']]);
  return new RawJson(open.repeat(depth) + JSON.stringify(oddString(random)) + close.repeat(depth));
}

/** `value` as JSON text, each RawJson in it spliced in as it is. */
function toJson(value: unknown): string {
  const raw: string[] = [];
  const text = JSON.stringify(value, (_key, item: unknown) => (item instanceof RawJson ? `\u0000raw${raw.push(item.text) - 1}` : item));
  return text.replace(/"\\u0000raw(\d+)"/g, (_match, index: string) => raw[Number(index)]);
}

/** Replaces one leaf (or adds one key) somewhere in `body`, in place. */
function mutateBody(body: unknown, random: Random): unknown {
  if (!body || typeof body !== 'object' || random.below(10) === 0) return oddValue(random);
  const containers: Record<string, unknown>[] = [];
  const visit = (value: unknown) => {
    if (!value || typeof value !== 'object') return;
    containers.push(value as Record<string, unknown>);
    for (const child of Object.values(value)) visit(child);
  };
  visit(body);
  const container = random.pick(containers);
  const keys = Object.keys(container);
  if (keys.length === 0 || random.below(5) === 0) container[Array.isArray(container) ? String(keys.length) : oddString(random)] = oddValue(random);
  else container[random.pick(keys)] = oddValue(random);
  return body;
}

/** The endpoints fuzzed, each with a valid request to start from (`n` keeps created names apart). */
function cases(target: FuzzTarget, n: number): Case[] {
  const { token, taskKey, adminToken, functionId, versionId, taskId } = target;
  const fn = () => ({
    name: `fz-${n}`, inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/echo:1', containerArgs: '--x 1',
    containerEnvironment: [{ key: 'MODE', value: 'fast' }], description: 'fuzzed', tags: ['a:b'],
    secrets: [{ name: 'plain', value: 'v' }, { name: 'object', value: { user: 'u', nested: { k: 'v' } } }],
    models: [{ name: 'm', version: '1', uri: 'https://example.com/m' }],
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 },
  });
  const version = `/v2/svc/functions/${functionId}/versions/${versionId}`;
  return [
    { method: 'POST', path: '/v2/svc/functions', host: 'api', bearer: token, body: fn() },
    { method: 'POST', path: `/v2/svc/functions/${functionId}/versions`, host: 'api', bearer: token, body: fn() },
    { method: 'PUT', path: version, host: 'api', bearer: token, body: { tags: ['x'], description: 'changed' } },
    { method: 'PUT', path: `/v2/svc/secrets/functions/${functionId}/versions/${versionId}`, host: 'api', bearer: token, body: { secrets: [{ name: 'k', value: 'v' }] } },
    { method: 'GET', path: '/v2/svc/functions', host: 'api', bearer: token, query: { limit: '5', visibility: 'private' } },
    { method: 'POST', path: '/v2/svc/assets', host: 'api', bearer: token, body: { contentType: 'text/plain', description: 'fuzzed' } },
    {
      method: 'POST', path: '/v2/svc/registry-credentials', host: 'api', bearer: token,
      body: { registryHostname: 'registry.example.com', secret: { name: `r${n}`, value: 'dXNlcjpwYXNz' }, tags: ['t'], description: 'd' },
    },
    {
      method: 'POST', path: '/v2/svc/telemetries', host: 'api', bearer: token,
      body: {
        name: `t${n}`, endpoint: 'https://otlp.example.com/otlp', protocol: 'HTTP', provider: 'GRAFANA_CLOUD', types: ['LOGS', 'TRACES'],
        secret: { name: 'token', value: { username: 'u', password: 'p' } },
      },
    },
    {
      method: 'POST', path: '/v1/accounts/svc-default/clusters', host: 'api', bearer: token,
      body: {
        clusterName: `fz-${n}`, clusterGroupName: 'fz', clusterDescription: 'd', region: 'eu', capabilities: ['c'], attributes: ['a'],
        gpus: [{ name: 'L40', instanceTypes: [{ name: 'L40.x1', description: 'one', cpuCores: 2, systemMemory: '4Gi' }] }],
      },
    },
    { method: 'POST', path: `/v2/svc/accounts/fz-${n}`, host: 'api', bearer: adminToken, body: { name: 'fuzzed', adminClientIds: ['c'] } },
    { method: 'PATCH', path: '/v2/svc/accounts/fz-patched', host: 'api', bearer: adminToken, body: { maxTelemetriesAllowed: 5 } },
    {
      method: 'POST', path: '/v1/svct/tasks', host: 'api', bearer: taskKey,
      body: {
        name: `fz-${n}`, gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x' }, containerImage: 'test/echo:1',
        containerEnvironment: [{ key: 'MODE', value: 'x' }], secrets: [{ name: 's', value: 'v' }], tags: ['t'], description: 'd',
        resultsLocation: 'org/name',
      },
    },
    { method: 'PUT', path: `/v1/svct/secrets/tasks/${taskId}`, host: 'api', bearer: taskKey, body: { secrets: [{ name: 's', value: 'w' }] } },
    { method: 'GET', path: '/v1/svct/tasks', host: 'api', bearer: taskKey, query: { limit: '5', status: 'QUEUED' } },
    {
      method: 'POST', path: '/v1/keys', host: 'keys', bearer: token,
      headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': 'fuzzer' },
      body: {
        description: 'fuzzed', expires_at: new Date(Date.now() + 86_400_000).toISOString(),
        authorizations: { policies: [{ product: 'svc-cloud-functions', scopes: ['invoke_function'] }] },
      },
    },
    { method: 'GET', path: '/v1/keys', host: 'keys', bearer: token, query: { limit: '5' } },
  ];
}

/** Percent-encodes `text`, a lone surrogate as the bytes UTF-8 would give it (which no decoder accepts). */
const encodePathSegment = (text: string) =>
  Array.from(text, (char) => (char.isWellFormed() ? encodeURIComponent(char) : '%ED%A0%80')).join('');

/** One request mutated in one place: its body, a path segment, a query value or a header. */
function mutate(original: Case, random: Random): Case {
  const mutated = { ...original, body: original.body === undefined ? undefined : structuredClone(original.body) };
  const where = random.below(10);
  if (where === 0) {
    const segments = mutated.path.split('/');
    segments[1 + random.below(segments.length - 1)] = encodePathSegment(oddString(random).slice(0, 4000));
    mutated.path = segments.join('/');
  } else if (where === 1) {
    mutated.query = { ...mutated.query, [random.pick(['limit', 'cursor', 'visibility', 'status', oddString(random).slice(0, 50)])]: oddString(random).slice(0, 4000) };
  } else if (where === 2 && mutated.headers) {
    mutated.headers = { ...mutated.headers, [random.pick(Object.keys(mutated.headers))]: oddHeader(random) };
  } else if (mutated.body !== undefined) {
    mutated.body = mutateBody(mutated.body, random);
  } else {
    mutated.query = { ...mutated.query, cursor: oddString(random).slice(0, 4000) };
  }
  return mutated;
}

function send(target: FuzzTarget, agent: http.Agent, request: Case): Promise<{ status: number; type: string; text: string }> {
  const { hostname, port } = new URL(target.url);
  // The path as it is (a URL would read a leading // as a host); the query encoded as any client would.
  const query = new URLSearchParams(request.query ?? {}).toString();
  const payload = request.body === undefined ? undefined : toJson(request.body);
  const headers: Record<string, string> = {
    ...request.headers, host: `${target.hosts[request.host]}:${port}`, authorization: `Bearer ${request.bearer}`,
    ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
  };
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, path: query ? `${request.path}?${query}` : request.path, method: request.method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'] ?? '', text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const describeCase = (request: Case) =>
  `${request.method} ${request.path.slice(0, 200)} ${JSON.stringify(request.query ?? {}).slice(0, 200)} ${toJson(request.body ?? null).slice(0, 300)}`;

/** Sends `requests` fuzzed requests, `concurrency` at a time, and counts what came back. */
export async function fuzz(target: FuzzTarget, options: { requests: number; seed?: number; concurrency?: number }): Promise<FuzzReport> {
  const random = randomSource(options.seed ?? 25);
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.concurrency ?? 8 });
  const report: FuzzReport = { statuses: new Map(), failures: [] };
  let next = 0;
  const worker = async () => {
    while (next < options.requests) {
      const n = next++;
      const request = mutate(random.pick(cases(target, n)), random);
      const answer = await send(target, agent, request).catch((error: Error) => ({ status: 0, type: '', text: error.message }));
      report.statuses.set(answer.status, (report.statuses.get(answer.status) ?? 0) + 1);
      const bad = answer.status >= 500 || answer.status === 0 || (answer.status >= 400 && !answer.type.startsWith('application/problem+json'));
      if (bad && report.failures.length < 20) report.failures.push(`${answer.status} ${answer.text.slice(0, 300)} ← ${describeCase(request)}`);
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency ?? 8 }, worker));
  } finally {
    agent.destroy();
  }
  return report;
}

/** A platform made ready for the fuzzer: credentials of each kind, a function version and a task to update. */
export async function fuzzTarget(svc: TestPlatform): Promise<FuzzTarget> {
  const token = await svc.token();
  const adminToken = await svc.adminToken({ expiresInSeconds: 86_400 });
  const taskKey = await svc.apiKey(token, ['launch_task', 'list_tasks', 'update_secrets'], { task: true });
  const made = await svc.api('POST', '/v2/svc/functions', {
    bearer: token, body: { name: 'fuzz-target', inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/echo:1' },
  });
  const task = await svc.api('POST', '/v1/svct/tasks', {
    bearer: taskKey, body: { name: 'fuzz-target', gpuSpecification: { gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x' }, containerImage: 'test/echo:1' },
  });
  const patched = await svc.api('POST', '/v2/svc/accounts/fz-patched', { bearer: adminToken, body: {} });
  for (const response of [made, task, patched]) if (response.status !== 200) throw new Error(`fuzz target: ${response.status} ${response.text}`);
  return {
    url: svc.url, hosts: svc.platform.hosts, token, taskKey, adminToken,
    functionId: made.body.function.id, versionId: made.body.function.versionId, taskId: task.body.task.id,
  };
}

/** Settings that let fuzzed creates reach the store instead of a quota: no agent runs what they make. */
export const FUZZ_CONFIG = {
  compute: { inProcessAgent: false },
  api: { accountBootstrap: { limits: { maxFunctions: 10_000_000, maxTasks: 10_000_000, maxRegistryCredentials: 50 } } },
};
