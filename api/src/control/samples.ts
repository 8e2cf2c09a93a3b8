// `npm start` deploys the repository's sample functions (samples/functions.json) into the default
// account on the local cluster, once: a function that already exists by name is left as it is. For the
// streaming sample it also mints the key the demo proxy invokes it with.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Principal } from '../http/auth.ts';
import type { DeploymentsService } from './deployments/service.ts';
import { createFunctionSchema } from './functions/schema.ts';
import type { FunctionsRepo } from './functions/repo.ts';
import type { FunctionsService } from './functions/service.ts';
import type { KeyService } from './keys/service.ts';

export const SAMPLES_FILE = fileURLToPath(new URL('../../../samples/functions.json', import.meta.url));

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
  const bodies = (JSON.parse(readFileSync(SAMPLES_FILE, 'utf8')) as unknown[]).map((body) => createFunctionSchema.parse(body));
  const existing = new Map((await options.functionsRepo.listVersions(options.ncaId, 10_000)).map((row) => [row.name, row]));
  const deployed: DeployedSample[] = [];
  for (const body of bodies) {
    let row = existing.get(body.name);
    if (!row) {
      const fn = await options.functions.create(principal, body);
      await options.deployments.create(principal, fn.id, fn.versionId, {
        deploymentSpecifications: [{
          gpu: options.gpu.name, instanceType: options.gpu.instanceType, minInstances: 1, maxInstances: 1,
          maxRequestConcurrency: body.functionType === 'STREAMING' ? 1 : 8,
        }],
      });
      row = (await options.functionsRepo.findVersionById(fn.versionId))!;
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
