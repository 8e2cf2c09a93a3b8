// Spare platform connections: after the first open, the next upgrade goes out on a connection that
// was already established (and TLS-verified) before the browser asked.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { closed, expectOpen, openWebSocket } from './helpers/browser.ts';
import { createTestCa } from './helpers/pki.ts';
import { startFakePlatform } from './helpers/platform-upstream.ts';
import { startProxy } from './helpers/proxy.ts';

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await sleep(5);
}

describe('spare platform connections', () => {
  test('the next open uses a connection established ahead of it', async () => {
    const platform = await startFakePlatform();
    const running = await startProxy(platform, undefined);
    try {
      const first = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      assert.equal(platform.upgrades.at(-1)?.connection, 1);
      await until(() => platform.connections === 2); // the spare is up, no browser request pending
      const second = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      assert.equal(platform.upgrades.at(-1)?.connection, 2, 'the upgrade went out on the spare');
      await until(() => platform.connections === 3); // and it was replaced
      first.ws.close();
      second.ws.close();
      await Promise.all([closed(first.ws), closed(second.ws)]);
    } finally {
      await running.close();
      await platform.close();
    }
  });

  test('PROXY_UPSTREAM_SPARES=0: one connection per open, nothing ahead', async () => {
    const platform = await startFakePlatform();
    const running = await startProxy(platform, undefined, { PROXY_UPSTREAM_SPARES: '0' });
    try {
      const first = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      first.ws.close();
      await closed(first.ws);
      const second = expectOpen(await openWebSocket(`${running.wsUrl}/sign_in`));
      assert.equal(platform.connections, 2);
      assert.deepEqual(platform.upgrades.map((upgrade) => upgrade.connection), [1, 2]);
      second.ws.close();
      await closed(second.ws);
    } finally {
      await running.close();
      await platform.close();
    }
  });

  test('a platform that fails verification is not redialled in the background', async () => {
    const platform = await startFakePlatform();
    const otherCa = await createTestCa('someone else');
    const running = await startProxy(platform, undefined, { SVC_CA_FILE: otherCa.certFile });
    try {
      const refused = await openWebSocket(`${running.wsUrl}/sign_in`);
      assert.equal(refused.ok, false);
      await sleep(200);
      // The refused connection and at most one spare attempt; nothing more.
      assert.ok(platform.connections <= 2, `${platform.connections} connections`);
    } finally {
      await running.close();
      await platform.close();
    }
  });
});
