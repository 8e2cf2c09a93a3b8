// Logs and reasons of a real crashing container: the platform with its agent on the docker runtime against
// podman's Docker API (helpers/podman.ts), the project's echo image made to fail at start as a container
// missing its model would. Its last line is in its reason; its output is kept, redacted, for its account.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { agentNameOf } from '../src/compute/worker.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { image, needsPodman, removeContainers, startEngine, type Engine } from './helpers/podman.ts';
import { until } from './helpers/wait.ts';

const SECRET = 'tok-c0a1b2-never-served';
const health = { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT10S', expectedStatusCode: 200 };
const skip = needsPodman([image('echo')], 'logs of a crashing container');

describe('a crashing container on the docker runtime (podman)', { skip }, () => {
  let engine: Engine;
  let svc: TestPlatform;

  before(async () => {
    engine = await startEngine();
    svc = await startTestPlatform({ config: { compute: { agent: { runtime: 'docker', dockerSocket: engine.socketPath } } } });
  });

  after(async () => {
    await svc?.close();
    if (engine && svc) await removeContainers(engine, `svc.agent=${agentNameOf(path.join(svc.database.dataDir, 'agent'))}`);
    await engine?.close();
  });

  test('its last line in its reason; its output through the API, the secret redacted; another account 404', async () => {
    const token = await svc.token();
    const fn = await deploy(svc, token, echoBody({
      name: undefined, health, containerImage: image('echo'), secrets: [{ name: 'API_TOKEN', value: SECRET }],
      containerArgs: `node -e "console.log('loading with token ' + process.env.API_TOKEN); console.error('fatal: model weights not found'); process.exit(3)"`,
    }));
    const instance = await until('the crash in activeInstances', async () => {
      const record = (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token })).body.function;
      return record.activeInstances.find((item: { reason?: string }) => item.reason?.includes('exited with code 3'));
    }, 90_000);
    assert.match(instance.reason, /exited with code 3; last output: .*fatal: model weights not found$/);

    const logs = await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/logs`, { bearer: token });
    assert.equal(logs.status, 200);
    const lines = logs.body.logs.map((line: { stream: string; text: string }) => `${line.stream} ${line.text}`);
    assert.ok(lines.includes('stderr fatal: model weights not found'), JSON.stringify(lines));
    assert.ok(lines.includes('stdout loading with token [redacted]'), JSON.stringify(lines));
    assert.ok(!logs.text.includes(SECRET));

    assert.equal((await svc.api('POST', '/v2/svc/accounts/logs-podman-other', { bearer: await svc.adminToken(), body: {} })).status, 200);
    const other = await svc.token({ ncaId: 'logs-podman-other' });
    assert.equal((await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}/logs`, { bearer: other })).status, 404);
  });
});
