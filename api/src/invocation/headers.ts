// What crosses between client and container (wire-reference 5): client headers minus hop-by-hop ones,
// the platform's credential and any SVC-* the client sent; the SVC-* headers the platform adds.
import type { IncomingHttpHeaders } from 'node:http';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Invocation } from './invocation.ts';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'trailers',
  'transfer-encoding', 'upgrade', 'host', 'content-length',
]);

/**
 * Client headers that go to the container. The bearer is ours, not the function's, so it stays here. A
 * pexec body without a type is JSON (the reference's default); a host-routed request passes as it came.
 */
export function forwardedRequestHeaders(headers: IncomingHttpHeaders, passThrough = false): Record<string, string> {
  const forwarded: Record<string, string> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined || HOP_BY_HOP.has(name) || name === 'authorization' || name.startsWith('svc-')) continue;
    forwarded[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  if (!passThrough) forwarded['content-type'] ??= 'application/json';
  return forwarded;
}

/** What the container gets: the client's headers and the platform's SVC-* ones, as undici's flat list. */
export function containerHeaders(invocation: Invocation, instance: ReadyInstance, maxResultBytes: number): string[] {
  const { target } = invocation;
  const outputDir = instance.endpoint.outputDir ? `${instance.endpoint.outputDir}/${invocation.id}` : '';
  const headers: string[] = [];
  const { request } = invocation;
  for (const name in request.headers) headers.push(name, request.headers[name]);
  headers.push(
    'svc-reqid', invocation.id,
    'svc-sub', invocation.subject,
    'svc-ncaid', target.ncaId,
    'svc-function-name', target.functionName,
    'svc-function-id', target.functionId,
    'svc-function-version-id', target.versionId,
    'svc-asset-dir', outputDir ? `${outputDir}/assets` : '',
    'svc-large-output-dir', outputDir,
    'svc-max-response-size-bytes', String(maxResultBytes),
    'svc-backend', instance.backend,
    'svc-instancetype', instance.instanceType,
    'svc-region', instance.region,
    'svc-env', 'svc',
  );
  if (request.assets?.length) headers.push('svc-function-asset-ids', request.assets.join(','));
  return headers;
}

/** Container response headers that go to the client. */
export function forwardedResponseHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const forwarded: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !HOP_BY_HOP.has(name) && !name.startsWith('svc-')) forwarded[name] = value;
  }
  return forwarded;
}

/** SVC-STATUS as the reference sets it. */
export function svcStatus(status: number): 'in-progress' | 'fulfilled' | 'errored' {
  if (status === 202) return 'in-progress';
  return status >= 200 && status < 400 ? 'fulfilled' : 'errored';
}
