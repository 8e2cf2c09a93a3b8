// `npm start` deploys the repository's sample functions (samples/functions.json) into the default
// account on the local cluster: a function that already exists by name is left as it is, unless its
// container environment differs from the file's (an earlier npm start wrote another), in which case a
// version with the file's takes its place. For the streaming sample it also mints the key the demo proxy
// invokes it with.
import { existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { Principal } from '../domain/principal.ts';
import type { DeploymentsService } from './deployments/service.ts';
import { createFunctionSchema, type CreateFunction } from './functions/schema.ts';
import { documentOf, type FunctionsRepo, type VersionRow } from './functions/repo.ts';
import type { FunctionsService } from './functions/service.ts';
import type { KeyService } from './keys/service.ts';

export const SAMPLES_FILE = fileURLToPath(new URL('../../../samples/functions.json', import.meta.url));

/** The first file called `name` on PATH. */
export function onPath(name: string): string | undefined {
  return (process.env.PATH ?? '').split(delimiter).filter(Boolean).map((dir) => join(dir, name)).find((file) => existsSync(file));
}

/**
 * What the streaming sample shows on this machine, for the banner. The sample says STREAMING_SOURCE=auto,
 * so its container decides the same way each time it starts: an xterm on a virtual display when Xvfb
 * and xterm are installed, else its test scene (streaming-app/src/config.ts).
 */
export function demoSource(): { source: 'x11' | 'scene'; why: string } {
  const xvfb = onPath('Xvfb');
  if (!xvfb) return { source: 'scene', why: 'no Xvfb (Debian package xvfb): the demo streams its test scene' };
  if (!onPath('xterm')) return { source: 'scene', why: `Xvfb found (${xvfb}) but no xterm (Debian package xterm): the demo streams its test scene` };
  return { source: 'x11', why: `Xvfb found (${xvfb}): the demo streams an xterm on a virtual display` };
}

export interface DeployedSample {
  name: string;
  functionId: string;
  versionId: string;
  functionType: string;
}

export interface StreamingDemo {
  functionId: string;
  apiKey: string;
}

export async function deploySamples(options: {
  ncaId: string;
  functions: FunctionsService;
  functionsRepo: FunctionsRepo;
  deployments: DeploymentsService;
  keys: KeyService;
  serviceId: string;
  gpu: { name: string; instanceType: string };
  now: () => Date;
}): Promise<{ samples: DeployedSample[]; streamingDemo?: StreamingDemo }> {
  const principal: Principal = { credentialId: 'samples', kind: 'token', ncaId: options.ncaId, ownerId: 'svc-samples', scopes: new Set() };
  const bodies = z.array(createFunctionSchema).parse(JSON.parse(readFileSync(SAMPLES_FILE, 'utf8')));
  // Newest first: the first version of a name is the one in use.
  const existing = new Map<string, VersionRow>();
  for (const row of await options.functionsRepo.listVersions(options.ncaId, 10_000)) if (!existing.has(row.name)) existing.set(row.name, row);
  const deploy = async (functionId: string, versionId: string, body: CreateFunction) => {
    await options.deployments.create(principal, functionId, versionId, {
      deploymentSpecifications: [{
        gpu: options.gpu.name, instanceType: options.gpu.instanceType, minInstances: 1, maxInstances: 1,
        maxRequestConcurrency: body.functionType === 'STREAMING' ? 1 : 8,
      }],
    });
    return (await options.functionsRepo.findVersionById(versionId))!;
  };
  const deployed: DeployedSample[] = [];
  for (const body of bodies) {
    let row = existing.get(body.name);
    if (!row) {
      const fn = await options.functions.create(principal, body);
      row = await deploy(fn.id, fn.versionId, body);
    } else if (!sameEnvironment(row, body)) {
      // The new version first: deleting the last version of a function deletes the function.
      const fn = await options.functions.createVersion(principal, row.function_id, body);
      if (row.status !== 'INACTIVE') await options.deployments.remove(principal, row.function_id, row.version_id);
      await options.functions.remove(principal, row.function_id, row.version_id);
      row = await deploy(fn.id, fn.versionId, body);
    }
    deployed.push({ name: row.name, functionId: row.function_id, versionId: row.version_id, functionType: row.function_type });
  }
  const streaming = deployed.find((sample) => sample.functionType === 'STREAMING');
  if (!streaming) return { samples: deployed };
  const key = await options.keys.issueApiKey(principal,
    { 'key-issuer-service': 'svc-api', 'key-issuer-id': options.serviceId, 'key-owner-id': 'svc-demo-proxy' },
    {
      description: 'npm start: the demo streaming proxy', expires_at: new Date(options.now().getTime() + 7 * 86_400_000).toISOString(),
      authorizations: { policies: [{ scopes: ['invoke_function'] }] },
    });
  return { samples: deployed, streamingDemo: { functionId: streaming.functionId, apiKey: key.value! } };
}

function sameEnvironment(row: VersionRow, body: CreateFunction): boolean {
  return JSON.stringify(documentOf(row).containerEnvironment ?? []) === JSON.stringify(body.containerEnvironment ?? []);
}
