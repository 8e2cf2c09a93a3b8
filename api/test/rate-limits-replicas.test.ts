// Rate limits holding across API replicas: the windows live in a NATS KV bucket the replicas share
// (rate-limits/nats-windows.ts). Two NatsWindows on two connections stand for two replicas (with a clock
// the test moves), then two `svc serve` processes on one PostgreSQL and NATS JetStream answer a burst
// of 5-S together: 5 pass in the window, every other request gets 429 with Retry-After. Their owners'
// numbers (control/stats) add up what both replicas answered, asked of either.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { Pool } from 'undici';
import { parseRates } from '../src/rate-limits/rates.ts';
import { NatsWindows } from '../src/rate-limits/nats-windows.ts';
import type { Verdict } from '../src/rate-limits/windows.ts';
import { createLogger } from '../src/logger.ts';
import { createDatabase, postgresAvailable, type TestDatabase } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { request } from './helpers/http.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { serveReplicaPair, type ServedPlatform } from './helpers/served.ts';
import { until } from './helpers/wait.ts';

const [fivePerSecond] = parseRates('5-S');
const allowed = (verdicts: Verdict[]) => verdicts.filter((verdict) => verdict.allowed).length;

describe('rate limit windows shared on NATS', { skip: !natsServerAvailable() }, () => {
  let nats: TestNats;
  let clock = Date.now();
  const replicas: NatsWindows[] = [];
  before(async () => {
    nats = await startNats();
    const log = createLogger('warn');
    for (let i = 0; i < 2; i++) replicas.push(await NatsWindows.open(await nats.connect(), 'svc_rates', log, () => clock));
  });
  after(async () => {
    for (const windows of replicas) windows.close();
    await nats?.stop();
  });

  test('two replicas together let 5 of 20 through in a window of 5-S, and the next window 5 more', async () => {
    const key = `${randomUUID()}.a.account`;
    const verdicts = await Promise.all(Array.from({ length: 20 }, (_, i) => replicas[i % 2].take(key, fivePerSecond, clock)));
    assert.equal(allowed(verdicts), 5);
    for (const verdict of verdicts.filter((verdict) => !verdict.allowed)) {
      assert.ok(!verdict.allowed && verdict.retryAfterMs > 0 && verdict.retryAfterMs <= 1000, JSON.stringify(verdict));
    }
    clock += 1000;
    const next = await Promise.all(Array.from({ length: 8 }, (_, i) => replicas[i % 2].take(key, fivePerSecond, clock)));
    assert.equal(allowed(next), 5);
  });

  test('a window opened by one replica is the other\'s too: what it counts is refused there', async () => {
    const key = `${randomUUID()}.a.account`;
    const first = await Promise.all(Array.from({ length: 3 }, () => replicas[0].take(key, fivePerSecond, clock)));
    assert.equal(allowed(first), 3);
    clock += 500;
    const second = await Promise.all(Array.from({ length: 5 }, () => replicas[1].take(key, fivePerSecond, clock)));
    assert.equal(allowed(second), 2);
    const refused = second.find((verdict) => !verdict.allowed);
    assert.ok(refused && !refused.allowed && refused.retryAfterMs === 500, `the window ends 1 s after it opened: ${JSON.stringify(refused)}`);
  });

  test('with NATS unusable a replica lets requests through and says so once', async () => {
    const lines: string[] = [];
    const log = createLogger('warn', new Writable({ write(chunk, _encoding, done) { lines.push(String(chunk)); done(); } }) as never);
    const nc = await nats.connect();
    const windows = await NatsWindows.open(nc, 'svc_rates', log, () => clock);
    await nc.close();
    const key = `${randomUUID()}.a.account`;
    const verdicts = await Promise.all(Array.from({ length: 8 }, () => windows.take(key, fivePerSecond, clock)));
    assert.equal(allowed(verdicts), 8);
    assert.equal(lines.filter((line) => line.includes('rate limit windows unreachable on NATS')).length, 1, lines.join(''));
    windows.close();
  });
});

const ready = (await postgresAvailable()) && natsServerAvailable();

describe('two API replicas: one rate limit, one set of numbers', { skip: !ready }, () => {
  let database: TestDatabase;
  let nats: TestNats;
  let placement: ServedPlatform;
  let replica: ServedPlatform;
  let token: string;
  let apiKey: string;
  let fn: { id: string; versionId: string };
  const pools = new Map<string, Pool>();
  /** Answers either replica gave to an invocation that reached the version, by status (a 404 or 503 while it starts does not). */
  const answered = new Map<number, number>();

  const invoke = async (url: string) => {
    let pool = pools.get(url);
    if (!pool) pools.set(url, pool = new Pool(url, { connections: 32 }));
    const response = await pool.request({
      path: `/v2/svc/pexec/functions/${fn.id}`, method: 'POST', body: '{}',
      headers: { host: 'api.localhost', authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    });
    const text = await response.body.text();
    if (response.statusCode === 200 || response.statusCode === 429) answered.set(response.statusCode, (answered.get(response.statusCode) ?? 0) + 1);
    return { status: response.statusCode, retryAfter: response.headers['retry-after'], type: String(response.headers['content-type']), text };
  };

  before(async () => {
    database = await createDatabase('postgres');
    nats = await startNats();
    // No STUN/TURN: its default port (3478) is not for tests, and none of this needs it.
    ({ placement, replica } = await serveReplicaPair(database, nats.env, { SVC_STATS_INTERVAL_SECONDS: '1', SVC_TURN_SERVER: 'none' }));
    ({ token, apiKey } = await placement.credentials(['invoke_function', 'list_functions']));
    const api = (method: string, path: string, body?: unknown) => request(placement.url, method, path, { host: 'api.localhost', bearer: token, body });
    fn = (await api('POST', '/v2/svc/functions', echoBody({
      name: 'limited-echo', health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 },
    }))).body.function;
    await api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
      deploymentSpecifications: [{ gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 1, maxRequestConcurrency: 32 }],
    });
    await until('both replicas to serve', async () => (await invoke(placement.url)).status === 200 && (await invoke(replica.url)).status === 200, 60_000);
    const limited = await api('PUT', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { rateLimit: { rateLimit: '5-S' } });
    assert.equal(limited.status, 200, limited.text);
  });

  after(async () => {
    await Promise.all([...pools.values()].map((pool) => pool.close()));
    await replica?.stop();
    await placement?.stop();
    await database?.drop();
    await nats?.stop();
  });

  test('5-S: of 20 requests sent to both replicas within one window, 5 pass and 15 get 429 with Retry-After', async () => {
    const urls = [placement.url, replica.url];
    // Both replicas read the new limit within a second: each refuses once its windows are full.
    for (const url of urls) await until(`${url} to apply the limit`, async () => (await invoke(url)).status === 429);
    // The request that opens the next window, then a burst within it.
    await until('a new window to open', async () => (await invoke(placement.url)).status === 200);
    const answers = await Promise.all(Array.from({ length: 19 }, (_, i) => invoke(urls[i % 2])));
    const passed = answers.filter((answer) => answer.status === 200);
    const refused = answers.filter((answer) => answer.status === 429);
    assert.equal(passed.length, 4, `with the opener, 5 in the window; statuses ${answers.map((answer) => answer.status)}`);
    assert.equal(refused.length, 15);
    for (const answer of refused) {
      assert.match(answer.type, /^application\/problem\+json/);
      assert.equal(answer.retryAfter, '1');
      assert.match(JSON.parse(answer.text).detail, /Rate limit 5-S/);
    }
  });

  test('either replica\'s stats count what both answered', async () => {
    const total = [...answered.values()].reduce((sum, count) => sum + count, 0);
    for (const url of [replica.url, placement.url]) {
      const stats = await until(`${url} to count ${total} requests`, async () => {
        const response = await request(url, 'GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/stats?since=PT15M`, { host: 'api.localhost', bearer: apiKey });
        assert.equal(response.status, 200, response.text);
        return response.body.stats.totals.requests === total && response.body.stats;
      });
      assert.equal(stats.totals.rateLimited, answered.get(429));
      assert.equal(stats.totals.clientErrors, answered.get(429));
      assert.equal(stats.totals.serverErrors, 0);
      assert.ok(stats.totals.latencyMs.p99 > 0);
    }
  });
});
