// The owners' numbers (GET …/stats, `svc function stats`) against the real platform: after traffic a
// version shows its requests, latency percentiles, errors by class, rate-limited answers and queue depth;
// the numbers are in the store, so they survive a restart; another account gets 404; bad query
// parameters get 400 naming the field. Rows are written every second here (stats.intervalSeconds: 1).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseArgs } from 'node:util';
import { statsCommands } from '../src/cli/commands/stats.ts';
import type { CommandContext } from '../src/cli/command.ts';
import { versionStatsResponse } from '../src/control/stats/schema.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 };

describe('numbers for owners', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let errors: Deployed;
  let slow: Deployed;

  const pexec = (fn: Deployed, body: unknown) => svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body });
  const statsOf = async (fn: Deployed, query = '', bearer = key) =>
    svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/stats${query}`, { bearer });
  /** The version's stats once `holds` is true of them (rows come in at the end of each interval). */
  const statsWhen = (fn: Deployed, holds: (stats: any) => boolean) => until('the stats to show the traffic', async () => {
    const response = await statsOf(fn, '?since=PT10M&step=PT1M');
    assert.equal(response.status, 200, response.text);
    return holds(response.body.stats) && response.body.stats;
  });
  async function svcStats(args: string[]): Promise<string> {
    const command = statsCommands['function stats'];
    const parsed = parseArgs({ args, options: { ...command.options }, allowPositionals: true, strict: true });
    const printed: string[] = [];
    const context: CommandContext = {
      values: parsed.values, positionals: parsed.positionals, env: {}, state: { server: svc.url, gatewayAddress: 'localhost', apiKey: key },
      print: (human) => printed.push(human),
    };
    await command.run(context);
    return printed.join('\n');
  }

  before(async () => {
    svc = await startTestPlatform({ config: { stats: { intervalSeconds: 1 } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    errors = await deploy(svc, token, echoBody({
      name: undefined, containerImage: 'local/error:1', inferenceUrl: '/error', health, rateLimit: { rateLimit: '10-M' },
    }), { maxRequestConcurrency: 8 });
    slow = await deploy(svc, token, echoBody({ name: undefined, containerImage: 'local/slow:1', inferenceUrl: '/slow', health }), { maxRequestConcurrency: 1 });
    await waitFor(svc, key, errors, running);
    await waitFor(svc, key, slow, running);
  });
  after(() => svc?.close());

  test('after traffic the API shows requests, latency percentiles, errors by class and rate-limited answers', async () => {
    const statuses = [200, 200, 200, 200, 200, 200, 404, 500, 503, 200];
    const answers = await Promise.all(statuses.map((status) => pexec(errors, { status })));
    assert.deepEqual(answers.map((answer) => answer.status), statuses);
    const limited = await Promise.all([1, 2].map(() => pexec(errors, { status: 200 })));
    assert.deepEqual(limited.map((answer) => answer.status), [429, 429], 'the 10-M limit refuses the 11th and 12th');

    const stats = await statsWhen(errors, (found) => found.totals.requests === 12);
    versionStatsResponse.parse({ stats });
    assert.equal(stats.functionId, errors.id);
    assert.equal(stats.functionVersionId, errors.versionId);
    assert.equal(stats.stepSeconds, 60);
    assert.equal(stats.intervalSeconds, 1);
    assert.equal(stats.totals.clientErrors, 3, '404 and two 429s');
    assert.equal(stats.totals.rateLimited, 2);
    assert.equal(stats.totals.serverErrors, 2, '500 and 503');
    assert.ok(stats.totals.requestsPerSecond > 0);
    const { p50, p99, mean } = stats.totals.latencyMs;
    assert.ok(p50 > 0 && p99 >= p50 && mean > 0, JSON.stringify(stats.totals.latencyMs));
    // Steps start at whole minutes: ten minutes back from now span 10 or 11 of them.
    assert.equal(stats.points.length, Math.ceil((Date.parse(stats.until) - Date.parse(stats.since)) / 60_000));
    assert.ok(stats.points.length === 10 || stats.points.length === 11);
    assert.equal(stats.points.reduce((sum: number, point: any) => sum + point.requests, 0), 12, 'the points add up to the totals');
    const busy = stats.points.find((point: any) => point.requests > 0);
    assert.ok(busy.latencyMs.p99 > 0 && busy.requestsPerSecond > 0);
    assert.equal(stats.points.find((point: any) => point.requests === 0)?.latencyMs, null, 'an idle step has no latency');
  });

  test('queue depth: requests waiting behind a busy instance show in the version\'s numbers', async () => {
    const answers = await Promise.all([1, 2, 3].map(() => pexec(slow, { seconds: 2 })));
    assert.ok(answers.every((answer) => answer.status === 200 || answer.status === 202));
    const stats = await statsWhen(slow, (found) => found.totals.requests >= 3 && found.totals.queueDepth.max >= 1);
    assert.ok(stats.totals.queueDepth.max <= 2, `at most two wait behind the first: ${JSON.stringify(stats.totals.queueDepth)}`);
    assert.ok(stats.totals.inflight.max >= 1);
    assert.ok(stats.totals.latencyMs.p99 >= 2000, `the last waited for two others: ${JSON.stringify(stats.totals.latencyMs)}`);
  });

  test('`svc function stats F V` prints the totals and a line per step; without V, every version', async () => {
    const printed = await svcStats([errors.id, errors.versionId, '--since', '10m', '--step', '2m']);
    assert.match(printed, new RegExp(`versionId\\s+${errors.versionId}`));
    assert.match(printed, /requests\s+12\b/);
    assert.match(printed, /rateLimited\s+2\b/);
    assert.match(printed, /serverErrors\s+2\b/);
    assert.match(printed, /p99Ms\s+\d/);
    assert.match(printed, /AT\s+REQUESTS\s+RPS\s+P50MS\s+P99MS\s+4XX\s+429\s+5XX\s+QUEUEMAX/);
    const steps = printed.split('\n').filter((line) => /^\d{4}-\d{2}-\d{2}T/.test(line)).length;
    assert.ok(steps === 5 || steps === 6, `ten minutes in steps of two starting at whole ones: ${steps}`);
    const all = await svcStats([errors.id]);
    assert.match(all, new RegExp(`versionId\\s+${errors.versionId}`));
    await assert.rejects(svcStats([errors.id, errors.versionId, '--since', 'soon']), /--since must look like/);
  });

  test('the numbers are in the store: they survive a restart', async () => {
    await svc.restart();
    const response = await statsOf(errors, '?since=PT10M');
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.stats.totals.requests, 12);
  });

  test('another account gets 404, as for an unknown version', async () => {
    await svc.api('POST', '/v2/svc/accounts/stats-other', { bearer: await svc.adminToken(), body: {} });
    const other = await svc.apiKey(await svc.token({ ncaId: 'stats-other' }), ['invoke_function', 'list_functions']);
    const response = await statsOf(errors, '', other);
    assert.equal(response.status, 404, response.text);
    assert.doesNotMatch(response.text, /requests/);
    const whole = await svc.api('GET', `/v2/svc/functions/${errors.id}/stats`, { bearer: other });
    assert.equal(whole.status, 404);
    const own = await svc.api('GET', `/v2/svc/functions/${errors.id}/stats`, { bearer: key });
    assert.equal(own.status, 200);
    assert.equal(own.body.stats.length, 1);
  });

  test('bad query parameters get 400 naming the field', async () => {
    const cases: [string, RegExp][] = [
      ['?since=yesterday', /query since: must be an ISO 8601 duration/],
      ['?since=P30D', /query since: reaches at most PT168H back/],
      ['?since=2999-01-01T00:00:00Z', /query since: must be in the past/],
      ['?step=often', /query step: must be an ISO 8601 duration/],
      ['?since=PT24H&step=PT1S', /query step: gives \d+ points; at most 1000/],
    ];
    for (const [query, message] of cases) {
      const response = await statsOf(errors, query);
      assert.equal(response.status, 400, `${query}: ${response.text}`);
      assert.match(String(response.headers['content-type']), /^application\/problem\+json/);
      assert.match(response.body.detail, message, query);
      assert.match(response.body.errors[0].field, /^query (since|step)$/);
    }
    const badId = await svc.api('GET', `/v2/svc/functions/${errors.id}/versions/not-a-uuid/stats`, { bearer: key });
    assert.equal(badId.status, 400);
  });
});
