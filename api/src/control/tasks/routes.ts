// Task endpoints (spec 4.4, 5.3 rule 4: task keys only, each route with its scope), the result download,
// and the agents' result upload.
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { TASK_RESULT_UPLOAD_PATH } from '../../compute/protocol.ts';
import { access, bearerOf } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import {
  bulkTasksResponse, bulkTasksSchema, createTaskSchema, getTaskQuery, listTasksQuery, pageQuery, resultParams,
  resultUploadQuery, resultUploadResponse, taskEventsResponse, taskListResponse, taskParams, taskResponse,
  taskResultsResponse, updateTaskSecretsSchema,
} from './schema.ts';
import type { TasksService } from './service.ts';

const tag = 'Tasks';

export function taskRoutes(tasks: TasksService) {
  return [
    route({
      method: 'POST', path: '/v1/svct/tasks', summary: 'Launch a task (it waits QUEUED for a GPU)', tag, access: access.tasks('launch_task'),
      body: createTaskSchema,
      responses: { 200: { description: 'The new task', schema: taskResponse } },
      handle: async ({ principal, body }) => ({ body: { task: await tasks.launch(principal, body) } }),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks', summary: "List the account's tasks, newest first", tag, access: access.tasks('list_tasks'),
      query: listTasksQuery,
      responses: { 200: { description: 'One page; `cursor` (and `limit`) only when there is another', schema: taskListResponse } },
      handle: async ({ principal, query }) => ({ json: await tasks.listJson(principal, query) }),
    }),
    route({
      method: 'POST', path: '/v1/svct/tasks/bulk', summary: 'Id, name and status of several tasks', tag, access: access.tasks('list_tasks'),
      body: bulkTasksSchema,
      responses: { 200: { description: "The account's tasks among the ids given (others are left out)", schema: bulkTasksResponse } },
      handle: async ({ principal, body }) => ({ body: await tasks.bulk(principal, body.taskIds) }),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks/{taskId}', summary: 'Task details', tag, access: access.tasks('task_details'),
      params: taskParams, query: getTaskQuery,
      responses: { 200: { description: 'The task; secrets by name only, even with includeSecrets', schema: taskResponse } },
      handle: async ({ principal, params }) => ({ body: { task: await tasks.get(principal, params.taskId) } }),
    }),
    route({
      method: 'DELETE', path: '/v1/svct/tasks/{taskId}', summary: 'Delete a task, its events, results and secrets (a running one is stopped)', tag,
      access: access.tasks('delete_task'), params: taskParams,
      responses: { 204: { description: 'Deleted' } },
      handle: async ({ principal, params }) => {
        await tasks.remove(principal, params.taskId);
        return { status: 204 };
      },
    }),
    route({
      method: 'POST', path: '/v1/svct/tasks/{taskId}/cancel', summary: 'Cancel a queued or running task', tag, access: access.tasks('cancel_task'),
      params: taskParams,
      responses: { 200: { description: 'The task, now CANCELED', schema: taskResponse } },
      handle: async ({ principal, params }) => ({ body: { task: await tasks.cancel(principal, params.taskId) } }),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks/{taskId}/events', summary: "A task's events, oldest first", tag, access: access.tasks('list_events'),
      params: taskParams, query: pageQuery,
      responses: { 200: { description: 'One page of events', schema: taskEventsResponse } },
      handle: async ({ principal, params, query }) => ({ body: await tasks.events(principal, params.taskId, query) }),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks/{taskId}/results', summary: "A task's results (UPLOAD)", tag, access: access.tasks('list_results'),
      params: taskParams, query: pageQuery,
      responses: { 200: { description: 'One page of results, each with its download link', schema: taskResultsResponse } },
      handle: async ({ principal, params, query }) => ({ body: await tasks.results(principal, params.taskId, query) }),
    }),
    route({
      method: 'GET', path: '/v1/svct/tasks/{taskId}/results/{resultId}/content', summary: 'Download one result file', tag,
      access: access.tasks('list_results'), params: resultParams,
      responses: { 200: { description: 'The file as uploaded', contentType: 'application/octet-stream', schema: z.unknown() } },
      handle: async ({ principal, params }, res) => {
        const file = await tasks.openResult(principal, params.taskId, params.resultId);
        res.status(200).set({
          'content-type': 'application/octet-stream', 'content-length': String(file.size),
          'content-disposition': `attachment; filename*=UTF-8''${encodeURIComponent(path.posix.basename(file.name))}`,
        });
        await pipeline(file.body, res);
        return undefined;
      },
    }),
    route({
      method: 'PUT', path: '/v1/svct/secrets/tasks/{taskId}', summary: "Set a task's secrets (a running task's secrets file is refreshed)", tag,
      access: access.tasks('update_secrets'), params: taskParams, body: updateTaskSecretsSchema,
      responses: { 204: { description: 'Secrets set (values are never returned)' } },
      handle: async ({ principal, params, body }) => {
        await tasks.updateSecrets(principal, params.taskId, body.secrets);
        return { status: 204 };
      },
    }),
    route({
      // Not a user endpoint: the bearer is the cluster's agent credential, which the tasks service checks
      // itself (user credentials never reach it), so the route is declared without a user access rule.
      method: 'PUT', path: TASK_RESULT_UPLOAD_PATH, summary: "An agent stores a result file of a task its cluster runs (bearer: the cluster's agent credential)",
      tag: 'Agents', access: access.public, params: taskParams, query: resultUploadQuery,
      responses: { 200: { description: 'The stored result', schema: resultUploadResponse } },
      handle: async ({ params, query, req }) => ({
        body: { result: await tasks.storeResult(bearerOf(req.headers.authorization), params.taskId, query.name, req) },
      }),
    }),
  ];
}
