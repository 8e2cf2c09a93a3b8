// Function lifecycle commands: functions, deployments, registry credentials, clusters.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { clusterCreatedSchema, clusterGroupsResponse, clusterSchema } from '../../control/clusters/schema.ts';
import { deploymentResponse, gpuSpecificationResponse, type Deployment } from '../../control/deployments/schema.ts';
import { functionListResponse, functionResponse } from '../../control/functions/schema.ts';
import { whoamiSchema } from '../../control/keys/schema.ts';
import { registryCredentialListResponse, registryCredentialResponse } from '../../control/registry/schema.ts';
import { call, CliError, everyPage, nothing } from '../client.ts';
import { fields, table } from '../format.ts';
import { secretValues } from '../secret-values.ts';
import type { Command, CommandContext } from '../command.ts';

/** Spec 5.3 rule 2: reads prefer SVC_API_KEY, management prefers SVC_TOKEN, each falling back to the other. */
export function bearer({ state }: CommandContext, use: 'read' | 'manage'): string {
  const chosen = use === 'read' ? state.apiKey ?? state.token : state.token ?? state.apiKey;
  if (!chosen) throw new CliError('no credential: run `svc init` (and `svc api-key generate`), or set SVC_TOKEN / SVC_API_KEY');
  return chosen;
}

function need(context: CommandContext, count: number, usage: string): string[] {
  const values = context.positionals.slice(0, count);
  if (values.length < count) throw new CliError(`usage: ${usage}`);
  return values.map(encodeURIComponent);
}

function readJson(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new CliError(`cannot read ${file}: ${(error as Error).message.split('\n')[0]}`);
  }
}

function integer(value: unknown, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^\d+$/.test(value)) throw new CliError(`--${flag} must be a whole number`);
  return Number(value);
}

const list = (value: unknown) => (typeof value === 'string' ? value.split(',').map((item) => item.trim()).filter(Boolean) : undefined);

const functionColumns = ['id', 'versionId', 'name', 'status', 'functionType', 'containerImage', 'createdAt'];

const functionCreate: Command = {
  summary: 'Create a function (or, with --function-id, a new version) from a reference JSON body or flags',
  usage: '--file body.json | --name N --image IMAGE --inference-url /path [--inference-port 8000] [--function-id ID]',
  options: {
    file: { type: 'string' }, name: { type: 'string' }, image: { type: 'string' }, 'inference-url': { type: 'string' },
    'inference-port': { type: 'string' }, 'function-id': { type: 'string' }, description: { type: 'string' },
  },
  async run(context) {
    const { values } = context;
    const body = typeof values.file === 'string' ? readJson(values.file) : {
      name: values.name, containerImage: values.image, inferenceUrl: values['inference-url'],
      inferencePort: integer(values['inference-port'], 'inference-port'), description: values.description,
    };
    const path = typeof values['function-id'] === 'string'
      ? `/v2/svc/functions/${encodeURIComponent(values['function-id'])}/versions` : '/v2/svc/functions';
    const { function: fn } = await call(context.state, 'api', 'POST', path, functionResponse, { bearer: bearer(context, 'manage'), body });
    context.print(fields(pick(fn, functionColumns)), { function: fn });
  },
};

function pick(record: Record<string, unknown>, keys: string[]) {
  return Object.fromEntries(keys.filter((key) => record[key] !== undefined).map((key) => [key, record[key]]));
}

const functionList: Command = {
  summary: 'List function versions (every page)',
  options: { visibility: { type: 'string' } },
  async run(context) {
    const query = new URLSearchParams({ limit: '1000' });
    if (typeof context.values.visibility === 'string') query.set('visibility', context.values.visibility);
    const functions = await everyPage(context.state, '/v2/svc/functions', query, functionListResponse, (page) => page.functions, bearer(context, 'read'));
    // Why a version has fewer instances than it should, while placement cannot give them (quota, capacity).
    const rows = functions.map((fn) => ({ ...fn, reason: fn.healthInfo?.map((issue) => issue.error).join('; ') }));
    context.print(table(rows, [...functionColumns, 'reason']), { functions });
  },
};

const functionGet: Command = {
  summary: 'Show a function version, or every version of a function',
  usage: '<functionId> [versionId]',
  async run(context) {
    const [functionId] = need(context, 1, 'svc function get <functionId> [versionId]');
    const versionId = context.positionals[1];
    if (!versionId) {
      const { functions } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/versions`, functionListResponse, {
        bearer: bearer(context, 'read'),
      });
      context.print(table(functions, functionColumns), { functions });
      return;
    }
    const { function: fn } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/versions/${encodeURIComponent(versionId)}`,
      functionResponse, { bearer: bearer(context, 'read') });
    // Why it is not running: its instances' failures with their last lines, or their last health check while starting.
    const reason = fn.healthInfo?.map((issue) => issue.error).join('; ');
    context.print(fields({ ...fn, ...(reason ? { reason } : {}) }), { function: fn });
  },
};

const functionUpdate: Command = {
  summary: "Change a version's tags, description or rate limit (N-S|M|H|D per calling account)",
  usage: '<functionId> <versionId> [--tags a,b] [--description text] [--rate-limit 10-S]',
  options: { tags: { type: 'string' }, description: { type: 'string' }, 'rate-limit': { type: 'string' } },
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc function update <functionId> <versionId> [--tags a,b] [--description text] [--rate-limit 10-S]');
    const rateLimit = context.values['rate-limit'];
    const body = { tags: list(context.values.tags), description: context.values.description, rateLimit: typeof rateLimit === 'string' ? { rateLimit } : undefined };
    const { function: fn } = await call(context.state, 'api', 'PUT', `/v2/svc/functions/${functionId}/versions/${versionId}`, functionResponse, {
      bearer: bearer(context, 'manage'), body,
    });
    context.print(fields(pick(fn, [...functionColumns, 'tags', 'description', 'rateLimit'])), { function: fn });
  },
};

const functionDelete: Command = {
  summary: 'Delete a function version',
  usage: '<functionId> <versionId>',
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc function delete <functionId> <versionId>');
    await call(context.state, 'api', 'DELETE', `/v2/svc/functions/${functionId}/versions/${versionId}`, nothing, { bearer: bearer(context, 'manage') });
    context.print(`Deleted version ${decodeURIComponent(versionId)}`, { deleted: decodeURIComponent(versionId) });
  },
};

const secretsSet: Command = {
  summary: "Set a version's secrets; the others are kept (values never on the command line: NAME from the environment, NAME=@file)",
  usage: '<functionId> <versionId> NAME|NAME=@file|NAME=value …',
  async run(context) {
    const usage = 'svc function secrets set <functionId> <versionId> NAME|NAME=@file|NAME=value …';
    const [functionId, versionId] = need(context, 2, usage);
    const secrets = secretValues(context.positionals.slice(2), context.env);
    if (!secrets.length) throw new CliError(`usage: ${usage}`);
    await call(context.state, 'api', 'PUT', `/v2/svc/secrets/functions/${functionId}/versions/${versionId}`, nothing, {
      bearer: bearer(context, 'manage'), body: { secrets },
    });
    const names = secrets.map((secret) => secret.name);
    context.print(`Set ${names.join(', ')}`, { set: names });
  },
};

const secretsList: Command = {
  summary: "A version's secrets, by name (their values are never shown)",
  usage: '<functionId> <versionId>',
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc function secrets list <functionId> <versionId>');
    const { function: fn } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/versions/${versionId}`,
      functionResponse, { bearer: bearer(context, 'read') });
    const names = fn.secrets ?? [];
    context.print(names.length ? names.join('\n') : '(no secrets)', { secrets: names });
  },
};

const specColumns = ['gpuSpecificationId', 'gpu', 'instanceType', 'minInstances', 'maxInstances', 'maxRequestConcurrency'];

function printDeployment(context: CommandContext, deployment: Deployment) {
  const { deploymentSpecifications, ...rest } = deployment;
  context.print(`${fields(rest)}\n\n${table(deploymentSpecifications, specColumns)}`, { deployment });
}

const deploymentCreate: Command = {
  summary: 'Deploy a function version',
  usage: '<functionId> <versionId> (--file spec.json | --gpu G --instance-type T [--min 1] [--max 1] [--concurrency 1] [--clusters a,b])',
  options: {
    file: { type: 'string' }, gpu: { type: 'string' }, 'instance-type': { type: 'string' }, min: { type: 'string' },
    max: { type: 'string' }, concurrency: { type: 'string' }, clusters: { type: 'string' },
  },
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc deployment create <functionId> <versionId> ...');
    const { values } = context;
    const body = typeof values.file === 'string' ? readJson(values.file) : {
      deploymentSpecifications: [{
        gpu: values.gpu, instanceType: values['instance-type'], minInstances: integer(values.min, 'min') ?? 1,
        maxInstances: integer(values.max, 'max') ?? 1, maxRequestConcurrency: integer(values.concurrency, 'concurrency'),
        clusters: list(values.clusters),
      }],
    };
    const { deployment } = await call(context.state, 'api', 'POST', `/v2/svc/deployments/functions/${functionId}/versions/${versionId}`, deploymentResponse, {
      bearer: bearer(context, 'manage'), body,
    });
    printDeployment(context, deployment);
  },
};

const deploymentGet: Command = {
  summary: 'Show the deployment of a version',
  usage: '<functionId> <versionId>',
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc deployment get <functionId> <versionId>');
    const { deployment } = await call(context.state, 'api', 'GET', `/v2/svc/deployments/functions/${functionId}/versions/${versionId}`, deploymentResponse, {
      bearer: bearer(context, 'manage'),
    });
    printDeployment(context, deployment);
  },
};

const deploymentUpdate: Command = {
  summary: 'Change the instance bounds of every specification of a deployment',
  usage: '<functionId> <versionId> --min N --max N [--concurrency N]',
  options: { min: { type: 'string' }, max: { type: 'string' }, concurrency: { type: 'string' } },
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc deployment update <functionId> <versionId> --min N --max N');
    const path = `/v2/svc/deployments/functions/${functionId}/versions/${versionId}`;
    const current = await call(context.state, 'api', 'GET', path, deploymentResponse, { bearer: bearer(context, 'manage') });
    const body = {
      deploymentSpecifications: current.deployment.deploymentSpecifications.map((spec) => ({
        gpuSpecificationId: spec.gpuSpecificationId,
        minInstances: integer(context.values.min, 'min') ?? spec.minInstances,
        maxInstances: integer(context.values.max, 'max') ?? spec.maxInstances,
        maxRequestConcurrency: integer(context.values.concurrency, 'concurrency'),
      })),
    };
    const { deployment } = await call(context.state, 'api', 'PUT', path, deploymentResponse, { bearer: bearer(context, 'manage'), body });
    printDeployment(context, deployment);
  },
};

const deploymentDelete: Command = {
  summary: 'Undeploy a version',
  usage: '<functionId> <versionId> [--graceful]',
  options: { graceful: { type: 'boolean', default: false } },
  async run(context) {
    const [functionId, versionId] = need(context, 2, 'svc deployment delete <functionId> <versionId>');
    const { function: fn } = await call(context.state, 'api', 'DELETE',
      `/v2/svc/deployments/functions/${functionId}/versions/${versionId}?graceful=${context.values.graceful === true}`, functionResponse, {
        bearer: bearer(context, 'manage'),
      });
    context.print(`Undeployed; version is ${fn.status}`, { function: fn });
  },
};

const deploymentPatch: Command = {
  summary: 'Change the bounds of one GPU specification',
  usage: '<deploymentId> <gpuSpecId> [--min N] [--max N]',
  options: { min: { type: 'string' }, max: { type: 'string' } },
  async run(context) {
    const [deploymentId, gpuSpecId] = need(context, 2, 'svc deployment patch <deploymentId> <gpuSpecId> [--min N] [--max N]');
    const body = { minInstances: integer(context.values.min, 'min'), maxInstances: integer(context.values.max, 'max') };
    const { gpuSpecification } = await call(context.state, 'api', 'PATCH', `/v2/svc/deployments/${deploymentId}/gpu-specifications/${gpuSpecId}`,
      gpuSpecificationResponse, { bearer: bearer(context, 'manage'), body });
    context.print(fields(gpuSpecification), { gpuSpecification });
  },
};

const registryColumns = ['registryCredentialId', 'registryCredentialName', 'registryHostname', 'artifactTypes', 'createdAt'];

const registryList: Command = {
  summary: 'List registry credentials',
  async run(context) {
    const { registryCredentials } = await call(context.state, 'api', 'GET', '/v2/svc/registry-credentials', registryCredentialListResponse, {
      bearer: bearer(context, 'manage'),
    });
    context.print(table(registryCredentials, registryColumns), { registryCredentials });
  },
};

const registryCreate: Command = {
  summary: 'Store a registry credential (the secret is sealed and never shown again)',
  usage: '--hostname nvcr.io --name N --secret <base64 user:password> [--artifact-types CONTAINER,HELM]',
  options: { hostname: { type: 'string' }, name: { type: 'string' }, secret: { type: 'string' }, 'artifact-types': { type: 'string' } },
  async run(context) {
    const { values } = context;
    const body = {
      registryHostname: values.hostname, secret: { name: values.name, value: values.secret ?? context.env.SVC_REGISTRY_SECRET },
      artifactTypes: list(values['artifact-types']),
    };
    const { registryCredential } = await call(context.state, 'api', 'POST', '/v2/svc/registry-credentials', registryCredentialResponse, {
      bearer: bearer(context, 'manage'), body,
    });
    context.print(fields(registryCredential), { registryCredential });
  },
};

const registryDelete: Command = {
  summary: 'Delete a registry credential',
  usage: '<registryCredentialId>',
  async run(context) {
    const [id] = need(context, 1, 'svc registry delete <registryCredentialId>');
    await call(context.state, 'api', 'DELETE', `/v2/svc/registry-credentials/${id}`, nothing, { bearer: bearer(context, 'manage') });
    context.print(`Deleted ${decodeURIComponent(id)}`, { deleted: decodeURIComponent(id) });
  },
};

const clusterColumns = ['clusterId', 'clusterName', 'clusterGroupName', 'status', 'gpus', 'nvcaVersion'];

async function accountOf(context: CommandContext): Promise<string> {
  const whoami = await call(context.state, 'api', 'GET', '/v2/svc/whoami', whoamiSchema, { bearer: bearer(context, 'manage') });
  return encodeURIComponent(whoami.ncaId);
}

const clusterList: Command = {
  summary: "List the account's clusters",
  async run(context) {
    const clusters = await call(context.state, 'api', 'GET', `/v1/accounts/${await accountOf(context)}/clusters`, z.array(clusterSchema), {
      bearer: bearer(context, 'manage'),
    });
    const rows = clusters.map((cluster) => ({ ...cluster, gpus: cluster.gpus.map((gpu) => gpu.name) }));
    context.print(table(rows, clusterColumns), { clusters });
  },
};

const clusterRegister: Command = {
  summary: 'Register a cluster; prints the credential its agent connects with (shown once)',
  usage: '<name> --group G [--gpu NAME:INSTANCE_TYPE[,NAME:INSTANCE_TYPE]] [--file body.json]',
  options: { group: { type: 'string' }, gpu: { type: 'string' }, file: { type: 'string' } },
  async run(context) {
    const { values } = context;
    let body: unknown;
    if (typeof values.file === 'string') body = readJson(values.file);
    else {
      const [name] = need(context, 1, 'svc cluster register <name> --group G [--gpu NAME:INSTANCE_TYPE]');
      const gpus = new Map<string, { name: string; instanceTypes: { name: string }[] }>();
      for (const item of list(values.gpu) ?? []) {
        const [gpu, instanceType] = item.split(':');
        if (!gpu || !instanceType) throw new CliError('--gpu takes NAME:INSTANCE_TYPE pairs');
        if (!gpus.has(gpu)) gpus.set(gpu, { name: gpu, instanceTypes: [] });
        gpus.get(gpu)!.instanceTypes.push({ name: instanceType });
      }
      body = { clusterName: decodeURIComponent(name), clusterGroupName: values.group, gpus: [...gpus.values()] };
    }
    const created = await call(context.state, 'api', 'POST', `/v1/accounts/${await accountOf(context)}/clusters`, clusterCreatedSchema, {
      bearer: bearer(context, 'manage'), body,
    });
    context.print(`${fields(created)}\n\nStart its agent with SVC_AGENT_CREDENTIAL set to the credential above.`, created);
  },
};

const clusterGet: Command = {
  summary: 'Show a cluster',
  usage: '<clusterId>',
  async run(context) {
    const [id] = need(context, 1, 'svc cluster get <clusterId>');
    const cluster = await call(context.state, 'api', 'GET', `/v1/accounts/${await accountOf(context)}/clusters/${id}`, clusterSchema, {
      bearer: bearer(context, 'manage'),
    });
    context.print(fields(cluster), cluster);
  },
};

const clusterDelete: Command = {
  summary: 'Deregister a cluster',
  usage: '<clusterId>',
  async run(context) {
    const [id] = need(context, 1, 'svc cluster delete <clusterId>');
    await call(context.state, 'api', 'DELETE', `/v1/accounts/${await accountOf(context)}/clusters/${id}`, nothing, { bearer: bearer(context, 'manage') });
    context.print(`Deregistered ${decodeURIComponent(id)}`, { deleted: decodeURIComponent(id) });
  },
};

const clusterGroups: Command = {
  summary: 'List the cluster groups and GPUs the account may deploy to',
  async run(context) {
    const { clusterGroups: groups } = await call(context.state, 'api', 'GET', '/v2/svc/clusterGroups', clusterGroupsResponse, {
      bearer: bearer(context, 'manage'),
    });
    const rows = groups.flatMap((group) => group.gpus.flatMap((gpu) => gpu.instanceTypes.map((type) => ({
      group: group.name, gpu: gpu.name, instanceType: type.name, clusters: group.clusters.map((cluster) => cluster.name),
    }))));
    context.print(table(rows, ['group', 'gpu', 'instanceType', 'clusters']), { clusterGroups: groups });
  },
};

export const functionCommands: Record<string, Command> = {
  'function create': functionCreate,
  'function list': functionList,
  'function get': functionGet,
  'function update': functionUpdate,
  'function delete': functionDelete,
  'function secrets set': secretsSet,
  'function secrets list': secretsList,
  'deployment create': deploymentCreate,
  'deployment get': deploymentGet,
  'deployment update': deploymentUpdate,
  'deployment delete': deploymentDelete,
  'deployment patch': deploymentPatch,
  'registry list': registryList,
  'registry create': registryCreate,
  'registry delete': registryDelete,
  'cluster list': clusterList,
  'cluster register': clusterRegister,
  'cluster get': clusterGet,
  'cluster delete': clusterDelete,
  'cluster groups': clusterGroups,
};
