// /v3/openapi: an OpenAPI 3.1 document generated from the declared routes and their zod schemas.
// Nothing here is written by hand per endpoint, so the document cannot drift from what is enforced.
import { z } from 'zod';
import { access } from './auth.ts';
import { route, type Route } from './route.ts';

type JsonSchema = Record<string, unknown>;

const problemSchema: JsonSchema = {
  type: 'object',
  required: ['type', 'title', 'status', 'detail', 'instance', 'requestId'],
  properties: {
    type: { type: 'string' }, title: { type: 'string' }, status: { type: 'integer' }, detail: { type: 'string' },
    instance: { type: 'string' }, requestId: { type: 'string' },
    errors: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, message: { type: 'string' } } } },
  },
};

export interface OpenApiInfo {
  title: string;
  version: string;
  description: string;
}

export function buildOpenApi(routes: Route[], info: OpenApiInfo) {
  const components: Record<string, JsonSchema> = { Problem: problemSchema };

  function toSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
    const { $schema: _ignored, $defs, ...json } = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as JsonSchema;
    const suffix = io === 'input' ? 'Input' : '';
    for (const [name, def] of Object.entries(($defs ?? {}) as Record<string, JsonSchema>)) {
      components[name + suffix] = relink(def, suffix) as JsonSchema;
    }
    return relink(json, suffix) as JsonSchema;
  }

  const paths: Record<string, Record<string, unknown>> = {};
  for (const spec of routes) {
    const parameters = [
      ...parametersOf(spec.params, 'path'),
      ...parametersOf(spec.query, 'query'),
      ...parametersOf(spec.headers, 'header'),
    ];
    const responses: Record<string, unknown> = {};
    for (const [status, response] of Object.entries(spec.responses)) {
      responses[status] = {
        description: response.description,
        ...(response.schema ? { content: { [response.contentType ?? 'application/json']: { schema: toSchema(response.schema, 'output') } } } : {}),
      };
    }
    responses.default = {
      description: 'Error (RFC 9457 problem details)',
      content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
    };
    const rule = spec.access;
    (paths[spec.path] ??= {})[spec.method.toLowerCase()] = {
      operationId: operationId(spec),
      summary: spec.summary,
      tags: [spec.tag],
      security: 'public' in rule ? [] : [{ bearer: [] }],
      ...('public' in rule ? {} : { 'x-svc-scopes': rule.anyOf, 'x-svc-credentials': rule.credentials }),
      ...(parameters.length ? { parameters } : {}),
      ...(spec.body ? { requestBody: { required: true, content: { 'application/json': { schema: toSchema(spec.body, 'input') } } } } : {}),
      responses,
    };
  }

  function parametersOf(schema: z.ZodType | undefined, where: 'path' | 'query' | 'header') {
    if (!schema) return [];
    const json = toSchema(schema, 'input');
    const properties = (json.properties ?? {}) as Record<string, JsonSchema>;
    const required = new Set((json.required ?? []) as string[]);
    return Object.entries(properties).map(([name, property]) => ({
      name, in: where, required: where === 'path' || required.has(name), schema: property,
    }));
  }

  return {
    openapi: '3.1.0',
    info,
    paths,
    components: { schemas: components, securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
  };
}

/** Points $defs references at components, suffixed as their definitions were. */
function relink(node: unknown, suffix: string): unknown {
  if (Array.isArray(node)) return node.map((item) => relink(item, suffix));
  if (!node || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    out[key] = key === '$ref' && typeof value === 'string' && value.startsWith('#/$defs/')
      ? `#/components/schemas/${value.slice('#/$defs/'.length)}${suffix}`
      : relink(value, suffix);
  }
  return out;
}

function operationId(spec: Route): string {
  const words = spec.path.split('/').filter((part) => part && !/^v\d$/.test(part) && part !== 'svc' && part !== 'svct')
    .map((part) => part.replace(/[{}]/g, '').replace(/[-_.](\w)/g, (_, c: string) => c.toUpperCase()));
  return [spec.method.toLowerCase(), ...words.map((word) => word[0].toUpperCase() + word.slice(1))].join('');
}

/** A host's routes plus GET /v3/openapi describing all of them, itself included. */
export function withOpenApi(routes: Route[], info: OpenApiInfo): Route[] {
  let document: unknown;
  const all = [...routes, route({
    method: 'GET', path: '/v3/openapi', summary: 'OpenAPI description of this host', tag: 'OpenAPI', access: access.public,
    responses: { 200: { description: 'OpenAPI 3.1 document', schema: z.object({ openapi: z.string(), paths: z.record(z.string(), z.unknown()) }).loose() } },
    handle: async () => ({ body: document }),
  })];
  document = buildOpenApi(all, info);
  return all;
}
