// Task commands (spec 4.4): launch, list, get, cancel, delete, events, results [--download]. Every task
// endpoint takes only a task key (spec 5.3 rule 4): SVC_TASK_API_KEY, or the one `svc api-key generate
// --task` saved.
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { taskEventsResponse, taskListResponse, taskResponse, taskResultsResponse, type Task } from '../../control/tasks/schema.ts';
import { call, CliError, everyPage, failureDetail, nothing } from '../client.ts';
import { fields, table } from '../format.ts';
import type { Command, CommandContext } from '../command.ts';
import type { CliState } from '../state.ts';

function taskKey({ state }: CommandContext): string {
  if (!state.taskApiKey) throw new CliError('no task key: run `svc api-key generate --task` (or set SVC_TASK_API_KEY)');
  return state.taskApiKey;
}

function taskId(context: CommandContext, usage: string): string {
  const [id] = context.positionals;
  if (!id) throw new CliError(`usage: svc ${usage}`);
  return encodeURIComponent(id);
}

async function readJson(file: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(file, 'utf8'));
  } catch (error) {
    throw new CliError(`cannot read ${file}: ${(error as Error).message.split('\n')[0]}`);
  }
}

/** K=V items (repeatable flags) → [[K, V]]. */
function pairs(values: unknown, flag: string): [string, string][] {
  const items = (Array.isArray(values) ? values : [values]).filter((item) => typeof item === 'string');
  return items.map((item) => {
    const at = item.indexOf('=');
    if (at < 1) throw new CliError(`--${flag} takes NAME=VALUE`);
    return [item.slice(0, at), item.slice(at + 1)];
  });
}

const taskColumns = ['id', 'name', 'status', 'percentComplete', 'createdAt'];

function printTask(context: CommandContext, task: Task) {
  const { instances, healthInfo, ...rest } = task;
  const shown = { ...rest, ...(healthInfo?.error ? { error: healthInfo.error } : {}), instances: instances
    .map((instance) => `${instance.instanceState}${instance.location ? `@${instance.location}` : ''}`) };
  context.print(fields(shown), { task });
}

const launch: Command = {
  summary: 'Launch a task from a reference JSON body or flags',
  usage: '--file body.json | --name N --image IMAGE --gpu G --instance-type T [--args "…"] [--env K=V]… [--secret NAME=VALUE]… '
    + '[--max-runtime PT1H] [--max-queued PT72H] [--grace PT1H] [--result-strategy UPLOAD|NONE] [--results-location org/name]',
  options: {
    file: { type: 'string' }, name: { type: 'string' }, image: { type: 'string' }, gpu: { type: 'string' }, 'instance-type': { type: 'string' },
    args: { type: 'string' }, env: { type: 'string', multiple: true }, secret: { type: 'string', multiple: true },
    'max-runtime': { type: 'string' }, 'max-queued': { type: 'string' }, grace: { type: 'string' },
    'result-strategy': { type: 'string' }, 'results-location': { type: 'string' }, description: { type: 'string' },
  },
  async run(context) {
    const { values } = context;
    const env = pairs(values.env, 'env');
    const secrets = pairs(values.secret, 'secret');
    const body = typeof values.file === 'string' ? await readJson(values.file) : {
      name: values.name, containerImage: values.image, containerArgs: values.args, description: values.description,
      gpuSpecification: { gpu: values.gpu, instanceType: values['instance-type'] },
      ...(env.length ? { containerEnvironment: env.map(([key, value]) => ({ key, value })) } : {}),
      ...(secrets.length ? { secrets: secrets.map(([name, value]) => ({ name, value })) } : {}),
      maxRuntimeDuration: values['max-runtime'], maxQueuedDuration: values['max-queued'], terminationGracePeriodDuration: values.grace,
      resultHandlingStrategy: values['result-strategy'], resultsLocation: values['results-location'],
    };
    const { task } = await call(context.state, 'api', 'POST', '/v1/svct/tasks', taskResponse, { bearer: taskKey(context), body });
    printTask(context, task);
  },
};

const list: Command = {
  summary: "List the account's tasks, newest first",
  usage: '[--status RUNNING] [--limit 50] [--all]',
  options: { status: { type: 'string' }, limit: { type: 'string' }, all: { type: 'boolean', default: false } },
  async run(context) {
    const { values } = context;
    const query = new URLSearchParams({ limit: typeof values.limit === 'string' ? values.limit : '50' });
    if (typeof values.status === 'string') query.set('status', values.status);
    const bearer = taskKey(context);
    // Without --all, the newest page only.
    const tasks = values.all === true
      ? await everyPage(context.state, '/v1/svct/tasks', query, taskListResponse, (page) => page.tasks, bearer)
      : (await call(context.state, 'api', 'GET', `/v1/svct/tasks?${query}`, taskListResponse, { bearer })).tasks;
    context.print(table(tasks, taskColumns), { tasks });
  },
};

const get: Command = {
  summary: 'Show a task: status, progress, health, instance',
  usage: '<taskId>',
  async run(context) {
    const id = taskId(context, 'task get <taskId>');
    const { task } = await call(context.state, 'api', 'GET', `/v1/svct/tasks/${id}`, taskResponse, { bearer: taskKey(context) });
    printTask(context, task);
  },
};

const cancel: Command = {
  summary: 'Cancel a queued or running task (a running one gets SIGTERM, then a kill after its grace period)',
  usage: '<taskId>',
  async run(context) {
    const id = taskId(context, 'task cancel <taskId>');
    const { task } = await call(context.state, 'api', 'POST', `/v1/svct/tasks/${id}/cancel`, taskResponse, { bearer: taskKey(context) });
    context.print(`Task ${task.id} is ${task.status}`, { task });
  },
};

const remove: Command = {
  summary: 'Delete a task with its events, results and secrets',
  usage: '<taskId>',
  async run(context) {
    const id = taskId(context, 'task delete <taskId>');
    await call(context.state, 'api', 'DELETE', `/v1/svct/tasks/${id}`, nothing, { bearer: taskKey(context) });
    context.print(`Deleted task ${decodeURIComponent(id)}`, { deleted: decodeURIComponent(id) });
  },
};

/** Events and results are read 100 a page. */
const hundredAPage = new URLSearchParams({ limit: '100' });

const events: Command = {
  summary: "A task's events, oldest first",
  usage: '<taskId>',
  async run(context) {
    const id = taskId(context, 'task events <taskId>');
    const list = await everyPage(context.state, `/v1/svct/tasks/${id}/events`, hundredAPage, taskEventsResponse, (page) => page.events, taskKey(context));
    context.print(table(list, ['createdAt', 'message']), { events: list });
  },
};

const results: Command = {
  summary: "A task's results; --download <dir> saves every file under dir",
  usage: '<taskId> [--download DIR]',
  options: { download: { type: 'string' } },
  async run(context) {
    const id = taskId(context, 'task results <taskId> [--download DIR]');
    const list = await everyPage(context.state, `/v1/svct/tasks/${id}/results`, hundredAPage, taskResultsResponse, (page) => page.results, taskKey(context));
    const dir = context.values.download;
    if (typeof dir !== 'string') {
      context.print(table(list, ['name', 'size', 'createdAt', 'resultId']), { results: list });
      return;
    }
    const root = path.resolve(dir);
    const saved: string[] = [];
    for (const result of list) {
      const file = path.resolve(root, ...result.name.split('/'));
      // Names come from the task; never write outside the directory asked for.
      if (!file.startsWith(root + path.sep)) throw new CliError(`result name ${JSON.stringify(result.name)} leaves ${root}; not saved`);
      await mkdir(path.dirname(file), { recursive: true });
      await download(context.state, result.downloadUrl, taskKey(context), file);
      saved.push(file);
    }
    context.print(saved.length ? `Saved ${saved.length} file(s) under ${root}:\n${saved.map((file) => `  ${path.relative(root, file)}`).join('\n')}` : '(no results)',
      { results: list, saved });
  },
};

/** GET a result's bytes into `file` (streamed; `call` reads bodies as text, which binary files are not). */
function download(state: CliState, url: string, bearer: string, file: string): Promise<void> {
  const target = new URL(url, state.server);
  const transport = target.protocol === 'https:' ? https : http;
  const headers = { host: `api.${state.gatewayAddress}${target.port ? `:${target.port}` : ''}`, authorization: `Bearer ${bearer}` };
  return new Promise((resolve, reject) => {
    const request = transport.request(target, { method: 'GET', headers }, (response) => {
      if (response.statusCode !== 200) {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const detail = failureDetail(Buffer.concat(chunks).toString('utf8'));
          reject(new CliError(`GET ${url} failed (${response.statusCode}): ${detail}`));
        });
        return;
      }
      pipeline(response, createWriteStream(file)).then(resolve, async (error: Error) => {
        await rm(file, { force: true });
        reject(error);
      });
    });
    request.on('error', (error: NodeJS.ErrnoException) => reject(new CliError(`cannot reach ${state.server} (${error.code ?? error.message})`)));
    request.end();
  });
}

export const taskCommands: Record<string, Command> = {
  'task launch': launch,
  'task list': list,
  'task get': get,
  'task cancel': cancel,
  'task delete': remove,
  'task events': events,
  'task results': results,
};
