// Logs commands (docs/api.md, "Logs"): `svc function logs F [V]` and `svc task logs T`, with --instance,
// --since, --tail and --follow (the endpoint's text/event-stream, printed line by line as it comes).
import { functionListResponse } from '../../control/functions/schema.ts';
import { logLine, logsResponse } from '../../control/logs/schema.ts';
import { call, CliError, followEvents } from '../client.ts';
import type { Command, CommandContext } from '../command.ts';
import { bearer } from './functions.ts';

type Line = { instanceId: string; timestamp: string; stream: string; text: string };

const options = {
  instance: { type: 'string' }, since: { type: 'string' }, tail: { type: 'string' }, follow: { type: 'boolean', short: 'f', default: false },
} as const;
const flags = '[--instance ID] [--since 10m|<ISO instant>] [--tail N] [--follow]';

/** One line as printed: time, the instance id's first 8 characters, stream, text. */
function render(line: Line): string {
  return `${line.timestamp}  ${line.instanceId.slice(0, 8)}  ${line.stream.padEnd(6)}  ${line.text}`;
}

function queryOf({ values }: CommandContext): URLSearchParams {
  const query = new URLSearchParams();
  if (typeof values.instance === 'string') query.set('instanceId', values.instance);
  if (typeof values.since === 'string') query.set('since', values.since);
  if (typeof values.tail === 'string') {
    if (!/^\d+$/.test(values.tail) || Number(values.tail) < 1) throw new CliError('--tail must be a whole number of lines (1 or more)');
    query.set('tail', values.tail);
  }
  if (values.follow === true) query.set('follow', 'true');
  return query;
}

async function show(context: CommandContext, path: string, credential: string): Promise<void> {
  const query = queryOf(context);
  if (context.values.follow !== true) {
    const { logs } = await call(context.state, 'api', 'GET', `${path}?${query}`, logsResponse, { bearer: credential });
    context.print(logs.length ? logs.map(render).join('\n') : '(no output kept)', { logs });
    return;
  }
  await followEvents(context.state, `${path}?${query}`, logLine, credential, (event, line) => {
    if (event === 'log' && line) context.print(render(line), line);
  });
}

/** The version named, else the function's newest version that is deployed (else its newest). */
async function versionOf(context: CommandContext, functionId: string, credential: string): Promise<string> {
  const named = context.positionals[1];
  if (named) return encodeURIComponent(named);
  const { functions } = await call(context.state, 'api', 'GET', `/v2/svc/functions/${functionId}/versions`, functionListResponse, { bearer: credential });
  const chosen = functions.find((fn) => fn.status !== 'INACTIVE') ?? functions[0];
  if (!chosen) throw new CliError(`function ${decodeURIComponent(functionId)} has no versions`);
  return encodeURIComponent(chosen.versionId);
}

const functionLogs: Command = {
  summary: "Show (or --follow) the output of a version's instances",
  usage: `<functionId> [versionId] ${flags}`,
  options,
  async run(context) {
    const [id] = context.positionals;
    if (!id) throw new CliError(`usage: svc function logs <functionId> [versionId] ${flags}`);
    const functionId = encodeURIComponent(id);
    const credential = bearer(context, 'read');
    const versionId = await versionOf(context, functionId, credential);
    await show(context, `/v2/svc/functions/${functionId}/versions/${versionId}/logs`, credential);
  },
};

const taskLogs: Command = {
  summary: 'Show (or --follow) the output of a task',
  usage: `<taskId> ${flags}`,
  options,
  async run(context) {
    const [id] = context.positionals;
    if (!id) throw new CliError(`usage: svc task logs <taskId> ${flags}`);
    if (!context.state.taskApiKey) throw new CliError('no task key: run `svc api-key generate --task` (or set SVC_TASK_API_KEY)');
    await show(context, `/v1/svct/tasks/${encodeURIComponent(id)}/logs`, context.state.taskApiKey);
  },
};

export const logCommands: Record<string, Command> = {
  'function logs': functionLogs,
  'task logs': taskLogs,
};
