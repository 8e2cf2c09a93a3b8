// What crosses between client and container (wire-reference 5): client headers minus hop-by-hop ones,
// the platform's credential and any SVC-* the client sent; the SVC-* headers the platform adds.
import type { IncomingHttpHeaders } from 'node:http';
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Invocation, ResponseHeaders } from './invocation.ts';

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'trailers',
  'transfer-encoding', 'upgrade', 'host', 'content-length', 'expect',
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

/** The SVC-* lines every request of a version to one instance carries: rendered once per pair. */
const fixedLines = new WeakMap<ReadyInstance, { target: Invocation['target']; maxResultBytes: number; lines: string }>();

function versionLines(target: Invocation['target'], instance: ReadyInstance, maxResultBytes: number): string {
  const known = fixedLines.get(instance);
  if (known?.target === target && known.maxResultBytes === maxResultBytes) return known.lines;
  const lines = `svc-ncaid: ${target.ncaId}\r\nsvc-function-name: ${target.functionName}\r\nsvc-function-id: ${target.functionId}\r\n`
    + `svc-function-version-id: ${target.versionId}\r\nsvc-max-response-size-bytes: ${maxResultBytes}\r\nsvc-backend: ${instance.backend}\r\n`
    + `svc-instancetype: ${instance.instanceType}\r\nsvc-region: ${instance.region}\r\nsvc-env: svc\r\n`;
  fixedLines.set(instance, { target, maxResultBytes, lines });
  return lines;
}

/** What the container gets: the client's headers and the platform's SVC-* ones, as header lines. */
export function containerHeaders(invocation: Invocation, instance: ReadyInstance, maxResultBytes: number): string {
  const { request } = invocation;
  const outputDir = instance.endpoint.outputDir ? `${instance.endpoint.outputDir}/${invocation.id}` : '';
  let lines = '';
  for (const name in request.headers) lines += `${name}: ${request.headers[name]}\r\n`;
  lines += `svc-reqid: ${invocation.id}\r\nsvc-sub: ${invocation.subject}\r\n`
    + `svc-asset-dir: ${outputDir && `${outputDir}/assets`}\r\nsvc-large-output-dir: ${outputDir}\r\n`
    + versionLines(invocation.target, instance, maxResultBytes);
  if (request.assets?.length) lines += `svc-function-asset-ids: ${request.assets.join(',')}\r\n`;
  return lines;
}

/** Container response headers that go to the client. */
export function forwardedResponseHeaders(headers: ResponseHeaders): ResponseHeaders {
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
