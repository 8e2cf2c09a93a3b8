// Input assets (wire-reference 5): create, upload to the signed URL, list/get/delete, the download URL, and
// SVC-INPUT-ASSET-REFERENCES on pexec: the function finds each asset in SVC-ASSET-DIR, put there by its
// cluster's agent before the request reached it. Written from the reference's request shapes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { metricValue } from './helpers/autoscaler-platform.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { request, type TestResponse } from './helpers/http.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

describe('assets', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let mirror: Deployed;

  before(async () => {
    svc = await startTestPlatform({ config: { assets: { maxBytes: 4096, urlSeconds: 600 } } });
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    mirror = await deploy(svc, token, { inferenceUrl: '/predict', inferencePort: 8000, containerImage: 'test/mirror:1' });
    await waitFor(svc, token, mirror, running);
  });
  after(() => svc.close());

  const create = (body: unknown = { contentType: 'text/plain', description: 'a note' }, bearer = key) =>
    svc.api('POST', '/v2/svc/assets', { bearer, body });
  /** A signed URL as a client uses it: no bearer, to the host it names. */
  const signed = (method: string, url: string, options: { headers?: Record<string, string>; body?: string } = {}): Promise<TestResponse> => {
    const parsed = new URL(url);
    return request(svc.url, method, parsed.pathname + parsed.search, { host: parsed.hostname, ...options });
  };
  const upload = (url: string, body: string, contentType = 'text/plain') => signed('PUT', url, { body, headers: { 'content-type': contentType } });

  test('create answers 200 with an id and an absolute upload URL; the asset exists once its bytes arrive', async () => {
    const created = await create();
    assert.equal(created.status, 200, created.text);
    const { assetId, uploadUrl, contentType, description } = created.body;
    assert.deepEqual({ contentType, description }, { contentType: 'text/plain', description: 'a note' });
    assert.match(uploadUrl, new RegExp(`^http://api\\.localhost:\\d+/v2/svc/assets/${assetId}/content\\?expires=\\d+&signature=`));
    assert.equal((await svc.api('GET', `/v2/svc/assets/${assetId}`, { bearer: key })).status, 404, 'not uploaded yet');

    const stored = await upload(uploadUrl, 'hello asset');
    assert.equal(stored.status, 200, stored.text);
    const got = await svc.api('GET', `/v2/svc/assets/${assetId}`, { bearer: key });
    assert.equal(got.status, 200);
    assert.deepEqual(Object.keys(got.body.asset).sort(), ['assetId', 'contentType', 'createdAt', 'description']);
    assert.equal(got.body.asset.assetId, assetId);
    const listed = await svc.api('GET', '/v2/svc/assets', { bearer: key });
    assert.ok(listed.body.assets.some((asset: { assetId: string }) => asset.assetId === assetId));

    const redirect = await svc.api('GET', `/v2/svc/assets/${assetId}/content-redirect`, { bearer: key });
    assert.equal(redirect.status, 200);
    const downloaded = await signed('GET', redirect.body.presignedUrl);
    assert.deepEqual([downloaded.status, downloaded.headers['content-type'], downloaded.text], [200, 'text/plain', 'hello asset']);

    assert.equal((await svc.api('DELETE', `/v2/svc/assets/${assetId}`, { bearer: key })).status, 204);
    assert.equal((await svc.api('GET', `/v2/svc/assets/${assetId}`, { bearer: key })).status, 404);
    assert.equal((await signed('GET', redirect.body.presignedUrl)).status, 404, 'its bytes went with it');
    assert.equal((await svc.api('DELETE', `/v2/svc/assets/${assetId}`, { bearer: key })).status, 404);
  });

  test('the signed URL: only for its own asset and method, with the Content-Type it was created with, within its size and time', async () => {
    const { body: { assetId, uploadUrl } } = await create();
    const wrongType = await upload(uploadUrl, 'x', 'image/png');
    assert.equal(wrongType.status, 400);
    assert.match(wrongType.body.detail, /text\/plain/);
    const forged = await signed('PUT', uploadUrl.replace(/signature=.{4}/, 'signature=AAAA'), { body: 'x', headers: { 'content-type': 'text/plain' } });
    assert.equal(forged.status, 403);
    const { body: other } = await create();
    assert.equal((await upload(uploadUrl.replace(assetId, other.assetId), 'x')).status, 403, 'a signature is for one asset');
    assert.equal((await signed('GET', uploadUrl)).status, 403, 'an upload URL does not download');
    const unsigned = await signed('PUT', uploadUrl.split('?')[0], { body: 'x', headers: { 'content-type': 'text/plain' } });
    assert.equal(unsigned.status, 400);
    assert.deepEqual(unsigned.body.errors.map((error: { field: string }) => error.field).sort(), ['query expires', 'query signature']);

    const tooBig = await upload(uploadUrl, 'x'.repeat(5000));
    assert.equal(tooBig.status, 413);
    assert.equal((await svc.api('GET', `/v2/svc/assets/${assetId}`, { bearer: key })).status, 404, 'nothing was kept');

    svc.advance(601_000);
    try {
      const late = await upload(uploadUrl, 'x');
      assert.equal(late.status, 403);
      assert.match(late.body.detail, /expired/);
    } finally {
      svc.advance(-601_000);
    }
  });

  test('refusals: a body without its fields 400s naming them; another account sees nothing; only invoke_function', async () => {
    const bad = await create({ description: 'no type' });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.errors[0].field, 'contentType');
    assert.equal((await create({ contentType: 'not a type', description: '' })).body.errors[0].field, 'contentType');

    const { body: { assetId, uploadUrl } } = await create();
    await upload(uploadUrl, 'mine');
    assert.equal((await svc.api('POST', '/v2/svc/accounts/assets-other', { bearer: await svc.adminToken(), body: {} })).status, 200);
    const other = await svc.apiKey(await svc.token({ ncaId: 'assets-other' }), ['invoke_function']);
    assert.equal((await svc.api('GET', `/v2/svc/assets/${assetId}`, { bearer: other })).status, 404);
    assert.equal((await svc.api('DELETE', `/v2/svc/assets/${assetId}`, { bearer: other })).status, 404);
    assert.deepEqual((await svc.api('GET', '/v2/svc/assets', { bearer: other })).body.assets, []);
    const listOnly = await svc.apiKey(token, ['list_functions']);
    assert.equal((await svc.api('GET', '/v2/svc/assets', { bearer: listOnly })).status, 403);
    assert.equal((await svc.api('GET', '/v2/svc/assets')).status, 401);
  });

  test('SVC-INPUT-ASSET-REFERENCES: each asset is in SVC-ASSET-DIR when the function runs; an unknown one is a 404 before anything runs', async () => {
    const ids: string[] = [];
    for (const text of ['first', 'second']) {
      const { body } = await create();
      assert.equal((await upload(body.uploadUrl, text)).status, 200);
      ids.push(body.assetId);
    }
    const pexec = (references: string, headers: Record<string, string> = {}) => svc.api('POST', `/v2/svc/pexec/functions/${mirror.id}`, {
      bearer: key, body: { input: 1 }, headers: { 'svc-input-asset-references': references, ...headers },
    });
    const answered = await pexec(ids.join(','));
    assert.equal(answered.status, 200, answered.text);
    assert.deepEqual(answered.body.assets, { [ids[0]]: 'first', [ids[1]]: 'second' });
    assert.equal(answered.body.headers['svc-function-asset-ids'], ids.join(','));
    assert.match(answered.body.headers['svc-asset-dir'], new RegExp(`/${answered.headers['svc-reqid']}/assets$`));

    // A request answered 202 keeps its assets: its result, polled, shows them.
    const slow = await pexec(ids[1], { 'svc-poll-seconds': '1', 'x-hold-ms': '1500' });
    assert.equal(slow.status, 202, slow.text);
    const polled = await svc.api('GET', `/v2/svc/pexec/status/${slow.headers['svc-reqid']}`, { bearer: key, headers: { 'svc-poll-seconds': '10' } });
    assert.equal(polled.status, 200, polled.text);
    assert.deepEqual(polled.body.assets, { [ids[1]]: 'second' });

    // Deleted while the request waited in line: it ends 500 saying why, and its slot goes to the next one.
    const { body: doomed } = await create();
    await upload(doomed.uploadUrl, 'gone soon');
    // The one slot busy first, then the doomed request waiting behind it (told by the metrics, not by time).
    const versionLoad = async (name: string) => metricValue((await svc.api('GET', '/metrics')).text, name, { function_version_id: mirror.versionId });
    const busy = pexec(ids[0], { 'x-hold-ms': '1000' });
    await until('the first request running', async () => (await versionLoad('svc_function_inflight_requests')) === 1);
    const queued = pexec(doomed.assetId);
    await until('the doomed request waiting', async () => (await versionLoad('svc_function_queue_depth')) === 1);
    assert.equal((await svc.api('DELETE', `/v2/svc/assets/${doomed.assetId}`, { bearer: key })).status, 204);
    assert.equal((await busy).status, 200);
    const failed = await queued;
    assert.equal(failed.status, 500, failed.text);
    assert.match(failed.body.detail, new RegExp(`input assets could not be put in place: the download of ${doomed.assetId} answered 404`));
    assert.equal((await pexec(ids[0])).status, 200, 'the instance takes the next request');

    const unknownId = '00000000-0000-0000-0000-00000000000a';
    const unknown = await pexec(`${ids[0]},${unknownId}`);
    assert.equal(unknown.status, 404);
    assert.match(unknown.body.detail, new RegExp(unknownId));
    const garbage = await pexec('not-an-id');
    assert.equal(garbage.status, 400);
    assert.equal(garbage.body.errors[0].field, 'header svc-input-asset-references.0');
  });
});
