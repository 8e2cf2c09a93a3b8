// Deploying a function and waiting for the execution plane to bring it up, for tests.
import { setTimeout as sleep } from 'node:timers/promises';
import { localSpec } from './fixtures.ts';
import type { TestPlatform } from './platform.ts';

export interface Deployed {
  id: string;
  versionId: string;
  name: string;
}

let names = 0;

/** Creates `body` (a fresh name unless it has one) and deploys it on the local cluster. */
export async function deploy(svc: TestPlatform, token: string, body: Record<string, unknown>, spec: Record<string, unknown> = {}): Promise<Deployed> {
  const created = await svc.api('POST', '/v2/svc/functions', { bearer: token, body: { ...body, name: body.name ?? `fn-${process.pid}-${++names}` } });
  if (created.status !== 200) throw new Error(`create: ${created.status} ${created.text}`);
  const fn = created.body.function;
  const deployed = await svc.api('POST', `/v2/svc/deployments/functions/${fn.id}/versions/${fn.versionId}`, {
    bearer: token, body: { deploymentSpecifications: [localSpec({ minInstances: 1, maxInstances: 1, ...spec })] },
  });
  if (deployed.status !== 200) throw new Error(`deploy: ${deployed.status} ${deployed.text}`);
  return { id: fn.id, versionId: fn.versionId, name: fn.name };
}

/** Polls the function version until `until` holds; fails with the last state after `timeoutMs`. */
export async function waitFor(svc: TestPlatform, bearer: string, fn: Deployed, until: (record: any) => boolean, timeoutMs = 30_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  let record: any;
  while (Date.now() < deadline) {
    record = (await svc.api('GET', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer })).body.function;
    if (until(record)) return record;
    await sleep(50);
  }
  throw new Error(`gave up waiting; last state: ${record?.status} ${JSON.stringify(record?.activeInstances)}`);
}

export const running = (record: any) => record.status === 'ACTIVE' && record.activeInstances.some((instance: any) => instance.instanceStatus === 'RUNNING');
