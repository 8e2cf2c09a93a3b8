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

/** CR, LF and NUL would end a header line early: values an admin or an agent chose lose them. */
const lineSafe = (value: string) => value.replace(/[\r\n\0]/g, ' ');

interface FixedLines {
  target: Invocation['target'];
  maxResultBytes: number;
  /** The SVC-* lines every request of the version to the instance carries. */
  lines: string;
  /** The instance's output directory, line-safe ('' when it has none). */
  outputDir: string;
}

/** Rendered once per version and instance, not per request. */
const fixed = new WeakMap<ReadyInstance, FixedLines>();

function fixedLines(target: Invocation['target'], instance: ReadyInstance, maxResultBytes: number): FixedLines {
  const known = fixed.get(instance);
  if (known?.target === target && known.maxResultBytes === maxResultBytes) return known;
  const values: [string, string][] = [
    ['svc-ncaid', target.ncaId], ['svc-function-name', target.functionName], ['svc-function-id', target.functionId],
    ['svc-function-version-id', target.versionId], ['svc-max-response-size-bytes', String(maxResultBytes)], ['svc-backend', instance.backend],
    ['svc-instancetype', instance.instanceType], ['svc-region', instance.region], ['svc-env', 'svc'],
  ];
  const lines = values.map(([name, value]) => `${name}: ${lineSafe(value)}\r\n`).join('');
  const rendered = { target, maxResultBytes, lines, outputDir: lineSafe(instance.endpoint.outputDir ?? '') };
  fixed.set(instance, rendered);
  return rendered;
}

/** What the container gets: the client's headers and the platform's SVC-* ones, as header lines. */
export function containerHeaders(invocation: Invocation, instance: ReadyInstance, maxResultBytes: number): string {
  const { request } = invocation;
  const { lines: fixedPart, outputDir: root } = fixedLines(invocation.target, instance, maxResultBytes);
  const outputDir = root && `${root}/${invocation.id}`;
  // The client's headers come from Node's parser, which refuses CR and LF in them.
  let lines = '';
  for (const name in request.headers) lines += `${name}: ${request.headers[name]}\r\n`;
  lines += `svc-reqid: ${invocation.id}\r\nsvc-sub: ${invocation.subject}\r\n`
    + `svc-asset-dir: ${outputDir && `${outputDir}/assets`}\r\nsvc-large-output-dir: ${outputDir}\r\n${fixedPart}`;
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
