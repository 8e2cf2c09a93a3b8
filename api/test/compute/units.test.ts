// The small pure pieces: argument splitting, image references, progress files, back-off, health targets
// and probes (against real listeners), the settings schema.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { describe, test } from 'node:test';
import { backoffDelay } from '../../src/compute/backoff.ts';
import { healthTarget, livenessTarget, probe } from '../../src/compute/health.ts';
import { parseProgress } from '../../src/compute/progress.ts';
import { splitArgs } from '../../src/compute/runtimes/args.ts';
import { lookUpImage } from '../../src/compute/runtimes/image-catalog.ts';
import { parseImageReference } from '../../src/compute/runtimes/image-reference.ts';
import { agentSettingsSchema, DEFAULT_IMAGE_CATALOG } from '../../src/compute/settings.ts';
import { instanceSpec, REPO_ROOT, SAMPLES_CATALOG, streamingSpec } from './helpers.ts';

describe('compute units', () => {
  test('containerArgs split like a shell would, without running one', () => {
    assert.deepEqual(splitArgs(undefined), []);
    assert.deepEqual(splitArgs('  a  b\tc '), ['a', 'b', 'c']);
    assert.deepEqual(splitArgs(`--name "two words" 'it''s' "say \\"hi\\"" a\\ b ""`), ['--name', 'two words', 'its', 'say "hi"', 'a b', '']);
    assert.deepEqual(splitArgs(`'$HOME; rm -rf /'`), ['$HOME; rm -rf /']);
    assert.throws(() => splitArgs('"open'), /unterminated " quote/);
  });

  test('image references: registry, name, tag, digest', () => {
    assert.deepEqual(parseImageReference('local/echo:1'), { name: 'local/echo', tag: '1', digest: undefined, registry: 'docker.io' });
    assert.deepEqual(parseImageReference('nvcr.io/org/team/app:2.0'), { name: 'nvcr.io/org/team/app', tag: '2.0', digest: undefined, registry: 'nvcr.io' });
    assert.deepEqual(parseImageReference('localhost:5000/app@sha256:ab'), { name: 'localhost:5000/app', tag: undefined, digest: 'sha256:ab', registry: 'localhost:5000' });
    assert.deepEqual(parseImageReference('ubuntu'), { name: 'ubuntu', tag: undefined, digest: undefined, registry: 'docker.io' });
  });

  test('progress files: percent clamped, partial response kept, half-written files rejected', () => {
    assert.deepEqual(parseProgress('{"id":"r","progress":42,"partialResponse":{"step":2}}'), { percent: 42, partialResponse: { step: 2 } });
    assert.deepEqual(parseProgress('{"progress":250}'), { percent: 100 });
    assert.deepEqual(parseProgress('{"progress":"x"}'), { percent: 0 });
    assert.equal(parseProgress('{"id":"r","prog'), undefined);
    assert.equal(parseProgress(''), undefined);
    assert.equal(parseProgress('7'), undefined);
  });

  test('back-off doubles up to its maximum', () => {
    const settings = { initialMs: 1000, maxMs: 30_000 };
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 50].map((n) => backoffDelay(settings, n)), [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  test('health: target from the function, HTTP status must match, GRPC is a TCP connect', async (t) => {
    const endpoint = { host: '127.0.0.1', ports: { inference: 1, health: 2 } };
    assert.deepEqual(healthTarget({ protocol: 'HTTP', uri: 'ready', port: 9, timeout: 'PT1.5S', expectedStatusCode: 204 }, endpoint),
      { check: 'http', host: '127.0.0.1', port: 2, path: '/ready', timeoutMs: 1500, expectedStatusCode: 204 });
    assert.equal(healthTarget({ protocol: 'HTTP', uri: '/', port: 9, timeout: 'ten seconds', expectedStatusCode: 200 }, endpoint).timeoutMs, 10_000);
    assert.equal(healthTarget({ protocol: 'GRPC', uri: '/', port: 9, timeout: 'PT1S', expectedStatusCode: 0 }, endpoint).check, 'tcp');
    const streaming = streamingSpec('x');
    assert.equal(livenessTarget(streaming, endpoint).check, 'tcp', 'STREAMING ready is 500 during a session: liveness is the control port');
    assert.equal(livenessTarget(instanceSpec('x'), endpoint).check, 'http');

    const server = http.createServer((req, res) => {
      if (req.url === '/hang') return; // never answers
      res.writeHead(req.url === '/ok' ? 200 : 500).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    // A failed assertion must not leave the server (and its hung connection) keeping the file running.
    t.after(() => {
      if (server.listening) server.close();
      server.closeAllConnections();
    });
    const port = (server.address() as AddressInfo).port;
    // Generous for the answers (a loaded machine may take a while to serve them); short only for the hang.
    const target = { check: 'http' as const, host: '127.0.0.1', port, path: '/ok', timeoutMs: 10_000, expectedStatusCode: 200 };
    assert.deepEqual(await probe(target), { healthy: true, detail: 'HTTP 200' });
    assert.deepEqual(await probe({ ...target, path: '/bad' }), { healthy: false, detail: 'HTTP 500' });
    assert.deepEqual(await probe({ ...target, path: '/ok', expectedStatusCode: 204 }), { healthy: false, detail: 'HTTP 200' });
    assert.deepEqual(await probe({ ...target, path: '/hang', timeoutMs: 300 }), { healthy: false, detail: 'timed out after 300 ms', timedOut: true });
    assert.deepEqual(await probe({ ...target, check: 'tcp' }), { healthy: true, detail: 'TCP connect' });
    // close() first: a connection accepted after closeAllConnections() would keep close() waiting forever.
    const closed = new Promise((resolve) => server.close(resolve));
    server.closeAllConnections();
    await closed;
    assert.deepEqual(await probe(target), { healthy: false, detail: 'ECONNREFUSED' });
    assert.deepEqual(await probe({ ...target, check: 'tcp' }), { healthy: false, detail: 'ECONNREFUSED' });
  });

  test('settings: defaults, the sample catalog, ranges from text', () => {
    const defaults = agentSettingsSchema.parse({});
    assert.equal(defaults.runtime, 'process');
    assert.equal(DEFAULT_IMAGE_CATALOG, SAMPLES_CATALOG);
    assert.equal(defaults.imageCatalog, SAMPLES_CATALOG);
    assert.deepEqual(defaults.udpPortRange, [47998, 48020]);
    assert.equal(defaults.udpPortsPerInstance, 4);
    const parsed = agentSettingsSchema.parse({ udpPortRange: '50000-50011', dockerGpus: 'true', stopGraceMs: '2000' });
    assert.deepEqual([parsed.udpPortRange, parsed.dockerGpus, parsed.stopGraceMs], [[50000, 50011], true, 2000]);
    assert.equal(agentSettingsSchema.safeParse({ udpPortRange: '6000-5000' }).success, false);
    assert.equal(agentSettingsSchema.safeParse({ runtime: 'kubernetes' }).success, false);
  });

  test('every sample function in samples/functions.json runs from the sample catalog', async () => {
    const functions = JSON.parse(await readFile(path.join(REPO_ROOT, 'samples/functions.json'), 'utf8')) as { name: string; containerImage: string }[];
    assert.deepEqual(functions.map((fn) => fn.name), ['echo', 'slow', 'sse', 'error', 'streaming-app']);
    for (const fn of functions) assert.ok(await lookUpImage(SAMPLES_CATALOG, fn.containerImage), `${fn.containerImage} is in the catalog`);
  });
});
