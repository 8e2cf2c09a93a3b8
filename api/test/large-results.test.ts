// Large results (wire-reference 5): a polled result over invocation.maxResultBytes is answered 302 with a
// signed Location of an application/zip holding <requestId>.response, as the reference does, instead of
// being refused. Opened with Debian's unzip, an outside reader.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';

const skip = !process.env.CI && !existsSync('/usr/bin/unzip') && 'needs Debian unzip to open the zip';
if (skip) console.log(`# skipping large results: ${skip}`);

describe('large results', { skip }, () => {
  let svc: TestPlatform;
  let key: string;
  let mirror: Deployed;

  before(async () => {
    svc = await startTestPlatform({ config: { invocation: { maxResultBytes: 1024, maxLargeResultBytes: 64 * 1024 } } });
    const token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function']);
    mirror = await deploy(svc, token, { inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/mirror:1' });
    await waitFor(svc, token, mirror, running);
  });
  after(() => svc.close());

  /** The mirror answers with what it was sent, so a large body makes a large response. */
  const invoke = (text: string, headers: Record<string, string> = {}) =>
    svc.api('POST', `/v2/svc/pexec/functions/${mirror.id}`, { bearer: key, body: { text }, headers });
  const poll = (requestId: string) => svc.api('GET', `/v2/svc/pexec/status/${requestId}`, { bearer: key, headers: { 'svc-poll-seconds': '10' } });
  const later = { 'svc-poll-seconds': '1', 'x-hold-ms': '1500' };

  test('a polled result over the limit: 302 to a signed zip URL on the host the client reached; the zip holds the response', async () => {
    const text = 'large '.repeat(2000);
    const accepted = await invoke(text, later);
    assert.equal(accepted.status, 202);
    const requestId = String(accepted.headers['svc-reqid']);
    const moved = await poll(requestId);
    assert.equal(moved.status, 302, moved.text);
    assert.equal(moved.headers['svc-status'], 'fulfilled');
    const location = String(moved.headers.location);
    assert.match(location, new RegExp(`^http://api\\.localhost:\\d+/v2/svc/large-results/${requestId}\\?expires=\\d+&signature=`));

    const url = new URL(location);
    const zip = await download(url.pathname + url.search);
    assert.equal(zip.headers['content-type'], 'application/zip');
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'svc-large-')), 'result.zip');
    writeFileSync(file, zip.body);
    execFileSync('unzip', ['-tq', file]);
    assert.equal(execFileSync('unzip', ['-Z1', file], { encoding: 'utf8' }).trim(), `${requestId}.response`);
    const response = JSON.parse(execFileSync('unzip', ['-p', file, `${requestId}.response`], { encoding: 'utf8' }));
    assert.equal(JSON.parse(response.body).text, text);
    assert.equal(response.headers['svc-reqid'], requestId);

    const forged = await download(url.pathname + url.search.replace(/signature=.{6}/, 'signature=AAAAAA'));
    assert.equal(forged.status, 403);
  });

  test('a waiting client gets a large response as it streams; a result too large even for a zip ends 502', async () => {
    const streamed = await invoke('x'.repeat(5000));
    assert.equal(streamed.status, 200);
    assert.equal(JSON.parse(streamed.body.body).text.length, 5000);

    const accepted = await invoke('y'.repeat(100_000), later);
    assert.equal(accepted.status, 202);
    const refused = await poll(String(accepted.headers['svc-reqid']));
    assert.equal(refused.status, 502);
    assert.match(refused.body.detail, /could not be kept as a large result/);
  });

  /** A signed URL as a client uses it: no bearer, bytes as they come. */
  function download(pathAndQuery: string) {
    return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
      const url = new URL(pathAndQuery, svc.url);
      http.get(url, { headers: { host: `api.localhost:${url.port}` } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      }).on('error', reject);
    });
  }
});
