// Logs endpoints (docs/api.md, "Logs"): a function version's and a task's, read with the scope that reads
// the function (the task). `follow=true` answers text/event-stream: one `log` event per line (the kept
// ones first), a `caught-up` event after them, then new lines as they are written.
import type { Request, Response } from 'express';
import type { LogLine } from '../../compute/protocol.ts';
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import type { LogFollower } from '../agents/logs.ts';
import { versionParams } from '../functions/schema.ts';
import { taskParams } from '../tasks/schema.ts';
import { logsQuery, logsResponse, type LogsQueryInput } from './schema.ts';
import type { LogsService, LogTarget } from './service.ts';

/** A comment line now and then keeps proxies from closing a quiet stream. */
const KEEP_ALIVE_MS = 15_000;

const described = {
  200: {
    description: 'The kept lines, oldest first; with `follow=true`, a text/event-stream of them (event `log`, data a LogLine), '
      + 'an event `caught-up`, then new lines as they are written',
    schema: logsResponse,
  },
};

export function logRoutes(logs: LogsService) {
  async function answer(target: LogTarget, query: LogsQueryInput, req: Request, res: Response) {
    if (query.follow !== 'true') return { body: { logs: await logs.read(target, query) } };
    followAsEvents(req, res, (follower) => logs.follow(target, query, follower));
    return undefined;
  }

  return [
    route({
      method: 'GET', path: '/v2/svc/functions/{functionId}/versions/{functionVersionId}/logs',
      summary: "The output of a version's instances (stdout and stderr, secret values redacted)", tag: 'Functions',
      access: access.functions('list_functions', 'list_functions_details'), params: versionParams, query: logsQuery,
      responses: described,
      handle: async ({ principal, params, query, req }, res) => answer(await logs.ofVersion(principal, params.functionId, params.functionVersionId), query, req, res),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks/{taskId}/logs', summary: "The output of a task (stdout and stderr, secret values redacted)", tag: 'Tasks',
      access: access.tasks('task_details'), params: taskParams, query: logsQuery,
      responses: described,
      handle: async ({ principal, params, query, req }, res) => answer(await logs.ofTask(principal, params.taskId), query, req, res),
    }),
  ];
}

function followAsEvents(req: Request, res: Response, follow: (follower: LogFollower) => () => void): void {
  // The head goes out once following has started: a follow that cannot start (no way to the agents) is
  // still a problem response, not a 200 whose stream breaks.
  const head = () => {
    if (res.headersSent) return;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    res.flushHeaders();
  };
  const write = (lines: LogLine[]) => {
    head();
    if (lines.length) res.write(lines.map((line) => `event: log\ndata: ${JSON.stringify(line)}\n\n`).join(''));
  };
  const stop = follow({
    onHistory: (lines) => {
      write(lines);
      res.write('event: caught-up\ndata: {}\n\n');
    },
    onLines: write,
  });
  head();
  const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), KEEP_ALIVE_MS);
  res.on('close', () => {
    clearInterval(keepAlive);
    stop();
  });
  req.socket.setTimeout(0);
}
