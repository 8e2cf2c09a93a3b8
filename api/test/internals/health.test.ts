// The start-up wait of compute/health.ts against a real HTTP server: what the reason of a version that
// never became healthy says about its last check.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { waitUntilHealthy, type HealthTarget } from '../../src/compute/health.ts';

const servers: http.Server[] = [];
after(() => {
  for (const server of servers) server.closeAllConnections();
  for (const server of servers) server.close();
});

/** A health endpoint that answers 503 to its first `answered` checks and then never answers. */
async function answersThenHangs(answered: number): Promise<HealthTarget> {
  let checks = 0;
  const server = http.createServer((_req, res) => {
    if (++checks <= answered) res.writeHead(503).end();
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { check: 'http', host: '127.0.0.1', port, path: '/health', timeoutMs: 60_000, expectedStatusCode: 200 };
}

const settings = { startupIntervalMs: 50, intervalMs: 50, failureThreshold: 2 };

test('a check the grace period cuts short does not hide the answer before it', async () => {
  // A grace long enough for the first answer on a loaded machine; the hanging check is what it cuts short.
  const outcome = await waitUntilHealthy(await answersThenHangs(1), 3_000, settings, new AbortController().signal);
  assert.deepEqual(outcome, { outcome: 'timeout', detail: 'HTTP 503' });
});

test('an app that never answered: the reason says the check timed out', async () => {
  const outcome = await waitUntilHealthy(await answersThenHangs(0), 300, settings, new AbortController().signal);
  assert.equal(outcome.outcome, 'timeout');
  assert.match((outcome as { detail: string }).detail, /^timed out after \d+ ms$/);
});
