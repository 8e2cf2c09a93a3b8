// Invocation (spec 4.1; wire-reference 5) against real instances run by the in-process agent: pass-through,
// SVC-* headers, poll window and 202s, progress, SSE, error rewrapping, the FIFO queue with
// maxRequestConcurrency, cancellation, queue limits and refusals.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { metricValue } from './helpers/autoscaler-platform.ts';
import { tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const sample = (image: string, inferenceUrl: string, extra: Record<string, unknown> = {}) => echoBody({
  name: undefined, containerImage: image, inferenceUrl,
  health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 }, ...extra,
});

describe('invocation', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let echo: Deployed;
  let slow: Deployed;
  const pexec = (fn: Deployed, body: unknown, headers: Record<string, string> = {}) =>
    svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: key, body, headers });

  before(async () => {
    svc = await startTestPlatform({ config: { invocation: { maxQueueDepth: 3, maxRequestBytes: 4096 } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'queue_details', 'list_functions']);
    echo = await deploy(svc, token, sample('local/echo:1', '/echo'));
    slow = await deploy(svc, token, sample('local/slow:1', '/slow'));
    await waitFor(svc, key, echo, running);
    await waitFor(svc, key, slow, running);
  });
  after(() => svc.close());

  test('the body and headers pass through; the container gets the SVC-* headers, not the bearer', async () => {
    const response = await pexec(echo, { hello: 'world' }, { 'x-custom': 'kept', 'svc-sub': 'forged' });
    assert.equal(response.status, 200);
    assert.equal(response.headers['svc-status'], 'fulfilled');
    const reqId = response.headers['svc-reqid'];
    assert.match(String(reqId), /^[0-9a-f-]{36}$/);
    assert.equal(response.headers['x-request-id'], reqId, 'one id per request: the HTTP request id is the invocation id');
    assert.deepEqual(response.body.echo, { hello: 'world' });
    const seen = response.body.headers;
    assert.equal(seen['svc-reqid'], reqId);
    assert.equal(seen['svc-function-id'], echo.id);
    assert.equal(seen['svc-function-version-id'], echo.versionId);
    assert.equal(seen['svc-function-name'], echo.name);
    assert.equal(seen['svc-ncaid'], 'svc-default');
    assert.equal(seen['svc-sub'], 'tester', 'the platform sets SVC-SUB; the client copy is dropped');
    assert.equal(seen['svc-instancetype'], 'LOCAL.CPU_1x');
    assert.equal(seen['svc-backend'], 'svc-local');
    assert.ok(seen['svc-large-output-dir'].endsWith(String(reqId)));
    assert.equal(seen.authorization, undefined, 'the platform credential stays with the platform');
    const byVersion = await svc.api('POST', `/v2/svc/pexec/functions/${echo.id}/versions/${echo.versionId}`, { bearer: key, body: { n: 2 } });
    assert.deepEqual(byVersion.body.echo, { n: 2 });
  });

  test('SVC-POLL-SECONDS: a non-integer or more than 3600 is a 400 naming the header; 0 means 1', async () => {
    for (const value of ['abc', '1.5', '3601']) {
      const response = await pexec(echo, {}, { 'svc-poll-seconds': value });
      assert.equal(response.status, 400, value);
      assert.equal(response.body.errors[0].field, 'header svc-poll-seconds');
    }
    assert.equal((await pexec(echo, {}, { 'svc-poll-seconds': '0' })).status, 200);
  });

  test('not done within the poll window: 202, then progress, then the final answer once', async () => {
    const first = await pexec(slow, { seconds: 2.5 }, { 'svc-poll-seconds': '1' });
    assert.equal(first.status, 202);
    assert.equal(first.headers['svc-status'], 'in-progress');
    const reqId = String(first.headers['svc-reqid']);
    const position = await svc.api('GET', `/v2/svc/queues/${reqId}/position`, { bearer: key });
    assert.deepEqual(position.body, { functionId: slow.id, functionVersionId: slow.versionId, positionInQueue: 0 });
    const progress = await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: key, headers: { 'svc-poll-seconds': '1' } });
    assert.equal(progress.status, 202);
    assert.equal(first.headers['x-request-id'], reqId);
    assert.equal(progress.headers['svc-reqid'], reqId);
    assert.match(String(progress.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    assert.notEqual(progress.headers['x-request-id'], reqId, 'a poll is a request of its own');
    const percent = Number(progress.headers['svc-percent-complete']);
    assert.ok(percent > 0 && percent < 100, `progress ${percent}`);
    assert.ok(progress.body.step >= 1, 'the partial response is the body');
    let final = progress;
    while (final.status === 202) final = await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
    assert.equal(final.status, 200);
    assert.equal(final.headers['svc-status'], 'fulfilled');
    assert.deepEqual(final.body, { done: true, seconds: 2.5 });
    assert.equal((await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: key })).status, 404, 'the answer is given once');
  });

  test("another account cannot poll or locate someone else's request", async () => {
    const pending = await pexec(slow, { seconds: 1.5 }, { 'svc-poll-seconds': '1' });
    assert.equal(pending.status, 202);
    await svc.api('POST', '/v2/svc/accounts/stranger', { bearer: await svc.adminToken(), body: {} });
    const strangerKey = await svc.apiKey(await svc.token({ ncaId: 'stranger' }), ['invoke_function', 'queue_details']);
    const reqId = pending.headers['svc-reqid'];
    assert.equal((await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: strangerKey })).status, 404);
    assert.equal((await svc.api('GET', `/v2/svc/queues/${reqId}/position`, { bearer: strangerKey })).status, 404);
    assert.equal((await svc.api('POST', `/v2/svc/pexec/functions/${echo.id}`, { bearer: strangerKey, body: {} })).status, 404);
    let final = await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
    while (final.status === 202) final = await svc.api('GET', `/v2/svc/pexec/status/${reqId}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
    assert.equal(final.status, 200);
  });

  test('Accept: text/event-stream streams events as they are produced', async () => {
    const sse = await deploy(svc, token, sample('local/sse:1', '/stream'));
    await waitFor(svc, key, sse, running);
    const events: { data: string; ended: boolean }[] = [];
    const status = await new Promise<number>((resolve, reject) => {
      const url = new URL(`/v2/svc/pexec/functions/${sse.id}`, svc.url);
      const req = http.request(url, {
        method: 'POST', headers: { host: `api.localhost:${url.port}`, authorization: `Bearer ${key}`, accept: 'text/event-stream', 'content-type': 'application/json' },
      }, (res) => {
        let ended = false;
        res.on('data', (chunk: Buffer) => {
          for (const line of chunk.toString().split('\n')) if (line.startsWith('data:')) events.push({ data: line.slice(5).trim(), ended });
        });
        res.on('end', () => {
          ended = true;
          resolve(res.statusCode ?? 0);
        });
        assert.equal(res.headers['content-type'], 'text/event-stream');
        assert.equal(res.headers['svc-status'], 'fulfilled');
      });
      req.on('error', reject);
      req.end(JSON.stringify({ count: 4, intervalMs: 150 }));
    });
    assert.equal(status, 200);
    assert.deepEqual(events.map((event) => JSON.parse(event.data).n), [1, 2, 3, 4]);
    assert.ok(events.every((event) => !event.ended), 'each event arrived while the stream was still open');
  });

  test("a container's 4xx/5xx comes back as problem+json with its error message", async () => {
    const failing = await deploy(svc, token, sample('local/error:1', '/error'));
    await waitFor(svc, key, failing, running);
    const boom = await pexec(failing, { status: 500, message: 'boom' });
    assert.equal(boom.status, 500);
    assert.equal(boom.headers['content-type'], 'application/problem+json; charset=utf-8');
    assert.equal(boom.headers['svc-status'], 'errored');
    assert.equal(boom.body.type, 'urn:inference-service:problem-details:internal-server-error');
    assert.equal(boom.body.detail, 'boom');
    assert.equal(boom.body.requestId, boom.headers['svc-reqid']);
    const teapot = await pexec(failing, { status: 418, message: 'short and stout' });
    assert.equal(teapot.status, 418);
    assert.equal(teapot.body.detail, 'short and stout');
  });

  test('a body over maxRequestBytes is a 413, whether its length is declared or it comes chunked after the head', async () => {
    const within = 'x'.repeat(4000);
    const over = 'x'.repeat(4100);
    assert.equal((await pexec(echo, { text: within })).body.echo.text.length, within.length);
    const refused = await pexec(echo, { text: over });
    assert.equal(refused.status, 413);
    assert.match(refused.body.detail, /exceeds 4096 bytes/);
    // The head first, the body chunked 100 ms later: it is counted as it arrives.
    const late = (body: string) => new Promise<{ status: number; body: any }>((resolve, reject) => {
      const request = http.request(`${svc.url}/v2/svc/pexec/functions/${echo.id}`, {
        method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      }, (response) => {
        let text = '';
        response.on('data', (chunk) => (text += chunk)).on('end', () => resolve({ status: response.statusCode!, body: JSON.parse(text) }));
      });
      request.on('error', reject);
      request.flushHeaders();
      setTimeout(() => request.end(body), 100);
    });
    assert.equal((await late(JSON.stringify({ text: within }))).body.echo.text.length, within.length);
    const lateRefused = await late(JSON.stringify({ text: over }));
    assert.equal(lateRefused.status, 413);
    assert.match(lateRefused.body.detail, /exceeds 4096 bytes/);
  });

  test('refusals: unknown 404, not deployed 404, STREAMING 400, a full queue 429', async () => {
    assert.equal((await svc.api('POST', '/v2/svc/pexec/functions/00000000-0000-4000-8000-000000000000', { bearer: key, body: {} })).status, 404);
    const idle = (await svc.api('POST', '/v2/svc/functions', { bearer: token, body: sample('local/echo:1', '/echo', { name: 'never-deployed' }) })).body.function;
    const notDeployed = await svc.api('POST', `/v2/svc/pexec/functions/${idle.id}`, { bearer: key, body: {} });
    assert.equal(notDeployed.status, 404);
    assert.match(notDeployed.body.detail, /not deployed/);

    // One slow request holds the only slot; three more fill the queue (maxQueueDepth 3); the next is refused.
    const held = await Promise.all([0, 1, 2, 3].map(() => pexec(slow, { seconds: 1 }, { 'svc-poll-seconds': '1' })));
    assert.ok(held.every((response) => response.status === 202 || response.status === 200));
    const extra = await Promise.all([0, 1].map(() => pexec(slow, { seconds: 0 }, { 'svc-poll-seconds': '1' })));
    const refused = extra.find((response) => response.status === 429);
    assert.ok(refused, `statuses ${extra.map((response) => response.status)}`);
    assert.equal(refused.headers['retry-after'], '1');
    for (const response of [...held, ...extra].filter((r) => r.status === 202)) {
      let final = response;
      while (final.status === 202) final = await svc.api('GET', `/v2/svc/pexec/status/${response.headers['svc-reqid']}`, { bearer: key, headers: { 'svc-poll-seconds': '5' } });
      assert.equal(final.status, 200);
    }
  });
});

describe('the queue under a burst', () => {
  let svc: TestPlatform;
  let key: string;
  let counter: Deployed;
  const counterFile = path.join(tempDir(), 'requests.log');

  before(async () => {
    svc = await startTestPlatform({ config: { log: { level: 'warn' } } });
    const token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'queue_details', 'list_functions']);
    counter = await deploy(svc, token, sample('test/counter:1', '/work', {
      containerEnvironment: [{ key: 'COUNTER_FILE', value: counterFile }],
    }), { maxRequestConcurrency: 4 });
    await waitFor(svc, key, counter, running);
  });
  after(() => svc.close());

  test('2,000 requests at one instance with concurrency 4: each runs exactly once, at most 4 at a time, positions only fall', async () => {
    const url = new URL(svc.url);
    const pool = new Pool(url.origin, { connections: 256 });
    const send = () => pool.request({
      path: `/v2/svc/pexec/functions/${counter.id}`, method: 'POST',
      headers: { host: `api.localhost:${url.port}`, authorization: `Bearer ${key}`, 'content-type': 'application/json', 'svc-poll-seconds': '1' },
      body: JSON.stringify({ ms: 5 }),
    }).then(async (response) => ({ status: response.statusCode, reqId: String(response.headers['svc-reqid']), body: await response.body.text() }));
    const answers = await Promise.all(Array.from({ length: 2000 }, send));
    assert.ok(answers.every((answer) => answer.status === 200 || answer.status === 202), 'every request was taken');

    // Follow a few waiting requests: their queue positions never rise.
    const watched = answers.filter((answer) => answer.status === 202).slice(-5);
    const trails = new Map(watched.map((answer) => [answer.reqId, [] as number[]]));
    for (let round = 0; round < 20 && watched.length; round++) {
      for (const answer of watched) {
        const position = await svc.api('GET', `/v2/svc/queues/${answer.reqId}/position`, { bearer: key });
        if (position.status === 200) trails.get(answer.reqId)!.push(position.body.positionInQueue);
      }
      await sleep(50);
    }
    for (const [reqId, trail] of trails) {
      assert.deepEqual(trail, [...trail].sort((a, b) => b - a), `positions of ${reqId} only fall: ${trail}`);
    }

    const results = new Map<string, string>();
    for (const answer of answers) {
      let { status, body } = answer;
      while (status === 202) {
        const polled = await pool.request({
          path: `/v2/svc/pexec/status/${answer.reqId}`, method: 'GET',
          headers: { host: `api.localhost:${url.port}`, authorization: `Bearer ${key}`, 'svc-poll-seconds': '10' },
        });
        status = polled.statusCode;
        body = await polled.body.text();
      }
      assert.equal(status, 200);
      results.set(answer.reqId, JSON.parse(body).id);
    }
    await pool.close();
    assert.equal(results.size, 2000);
    for (const [reqId, servedId] of results) assert.equal(servedId, reqId);

    const lines = readFileSync(counterFile, 'utf8').trim().split('\n').map((line) => line.split(' '));
    assert.equal(lines.length, 2000, `the function saw each request once (saw ${lines.length} lines, ${new Set(lines.map(([id]) => id)).size} ids)`);
    assert.equal(new Set(lines.map(([id]) => id)).size, 2000);
    const maxInFlight = Math.max(...lines.map(([, inFlight]) => Number(inFlight)));
    assert.ok(maxInFlight <= 4, `at most 4 at once, saw ${maxInFlight}`);
    const depth = await svc.api('GET', `/v2/svc/queues/functions/${counter.id}/versions/${counter.versionId}`, { bearer: key });
    assert.equal(depth.body.queues[0].queueDepth, 0);
  });

  test('a synchronous client that leaves before 202 takes its queued request with it', async () => {
    const before = readFileSync(counterFile, 'utf8').trim().split('\n').length;
    const url = new URL(svc.url);
    const pool = new Pool(url.origin, { connections: 8 });
    const headers = { host: `api.localhost:${url.port}`, authorization: `Bearer ${key}`, 'content-type': 'application/json', 'svc-poll-seconds': '30' };
    // Four requests fill the four slots for a while; a fifth waits in the queue until its client gives up.
    const load = async (name: string) => metricValue((await svc.api('GET', '/metrics')).text, name, { function_version_id: counter.versionId });
    const queueDepth = async () => (await svc.api('GET', `/v2/svc/queues/functions/${counter.id}`, { bearer: key })).body.queues[0].queueDepth;
    const busy = Array.from({ length: 4 }, () => pool.request({ path: `/v2/svc/pexec/functions/${counter.id}`, method: 'POST', headers, body: JSON.stringify({ ms: 1500 }) }));
    await until('the four slots to be busy', async () => (await load('svc_function_inflight_requests')) === 4);
    const leaving = new AbortController();
    const abandoned = pool.request({ path: `/v2/svc/pexec/functions/${counter.id}`, method: 'POST', headers, body: JSON.stringify({ ms: 0 }), signal: leaving.signal });
    await until('the fifth request to wait in the queue', async () => (await queueDepth()) === 1);
    leaving.abort();
    await assert.rejects(abandoned);
    await until('the abandoned request to leave the queue', async () => (await queueDepth()) === 0);
    for (const response of await Promise.all(busy)) assert.equal(response.statusCode, 200);
    // Nothing running or waiting: had the abandoned request run, its line would be in the file by now.
    await until('nothing running or waiting', async () => (await load('svc_function_inflight_requests')) === 0 && (await queueDepth()) === 0);
    assert.equal(readFileSync(counterFile, 'utf8').trim().split('\n').length, before + 4, 'the abandoned request never ran');
    await pool.close();
  });
});
