// Health prober of the worker agent. HTTP: GET http://<endpoint.host>:<health port><uri>, healthy iff the
// status equals expectedStatusCode within the function's ISO 8601 timeout. GRPC: a TCP connect to the
// health port within the timeout (we do not speak grpc.health.v1; a listening port is the signal).
// Starting instances are probed often until their first success; running ones every few seconds, and only
// several failures in a row count, so one slow answer does not restart a busy instance.
// STREAMING functions differ once RUNNING: their ready check answers 500 for the whole of a session by
// design (spec 4.6), so liveness is a TCP connect to the control port; whether an instance can take a
// session is the session broker's question, asked of /v1/streaming/ready directly.
import http from 'node:http';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseDuration } from '../duration.ts';
import type { Endpoint, HealthCheck, InstanceSpec } from './protocol.ts';

export interface HealthTarget {
  /** http: GET path, status must match; tcp: a connect is enough. */
  check: 'http' | 'tcp';
  host: string;
  port: number;
  path: string;
  timeoutMs: number;
  expectedStatusCode: number;
}

export interface ProbeSettings {
  /** Between probes while starting, until the first success. */
  startupIntervalMs: number;
  /** Between probes once RUNNING. */
  intervalMs: number;
  /** Failures in a row that make a RUNNING instance UNHEALTHY. */
  failureThreshold: number;
}

export const DEFAULT_PROBE_SETTINGS: ProbeSettings = { startupIntervalMs: 250, intervalMs: 5000, failureThreshold: 3 };

/** Used when the function's timeout is not a usable ISO 8601 duration. */
const FALLBACK_TIMEOUT_MS = 10_000;

export interface ProbeResult {
  healthy: boolean;
  /** One line for reports and logs: "HTTP 503", "ECONNREFUSED", "timed out after 1000 ms". */
  detail: string;
  timedOut?: true;
}

export function healthTarget(check: HealthCheck, endpoint: Endpoint): HealthTarget {
  const timeoutMs = parseDuration(check.timeout);
  return {
    check: check.protocol === 'GRPC' ? 'tcp' : 'http',
    host: endpoint.host,
    port: endpoint.ports.health,
    path: check.uri.startsWith('/') ? check.uri : `/${check.uri}`,
    timeoutMs: timeoutMs && timeoutMs > 0 ? timeoutMs : FALLBACK_TIMEOUT_MS,
    expectedStatusCode: check.expectedStatusCode,
  };
}

/** What keeps being checked once an instance is RUNNING. */
export function livenessTarget(spec: InstanceSpec, endpoint: Endpoint): HealthTarget {
  const target = healthTarget(spec.health, endpoint);
  return spec.functionType === 'STREAMING' ? { ...target, check: 'tcp' } : target;
}

export function probe(target: HealthTarget, signal?: AbortSignal): Promise<ProbeResult> {
  return target.check === 'tcp' ? probeTcp(target, signal) : probeHttp(target, signal);
}

function probeHttp(target: HealthTarget, signal?: AbortSignal): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const request = http.get({ host: target.host, port: target.port, path: target.path, agent: false, signal });
    const timer = setTimeout(() => {
      request.destroy();
      resolve({ healthy: false, detail: `timed out after ${target.timeoutMs} ms`, timedOut: true });
    }, target.timeoutMs);
    request.on('response', (response) => {
      clearTimeout(timer);
      response.resume();
      const status = response.statusCode ?? 0;
      resolve({ healthy: status === target.expectedStatusCode, detail: `HTTP ${status}` });
    });
    request.on('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ healthy: false, detail: error.code ?? error.message });
    });
  });
}

function probeTcp(target: HealthTarget, signal?: AbortSignal): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: target.host, port: target.port, signal });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ healthy: false, detail: `timed out after ${target.timeoutMs} ms`, timedOut: true });
    }, target.timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ healthy: true, detail: 'TCP connect' });
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ healthy: false, detail: error.code ?? error.message });
    });
  });
}

export type StartupOutcome =
  | { outcome: 'healthy' }
  | { outcome: 'timeout'; detail: string }
  | { outcome: 'aborted' };

/** A probe and its answer in words, for owners: "GET /healthz → 404 (expected 200)", "TCP connect to :8000 → ECONNREFUSED". */
export function describeProbe(target: HealthTarget, detail: string): string {
  if (target.check === 'tcp') return `TCP connect to :${target.port} → ${detail}`;
  const status = /^HTTP (\d+)$/.exec(detail)?.[1];
  return `GET ${target.path} → ${status ? `${status} (expected ${target.expectedStatusCode})` : detail}`;
}

/** A failed start-up probe, as waitUntilHealthy tells its caller. */
export interface StartupProbe {
  detail: string;
  tries: number;
  elapsedMs: number;
}

/** Probes every startupIntervalMs until the first success, or until graceMs has passed without one; onFailure hears each failed probe. */
export async function waitUntilHealthy(
  target: HealthTarget, graceMs: number, settings: ProbeSettings, signal: AbortSignal, onFailure?: (probe: StartupProbe) => void,
): Promise<StartupOutcome> {
  const started = Date.now();
  const deadline = started + graceMs;
  let tries = 0;
  let detail: string | undefined;
  while (!signal.aborted) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) return { outcome: 'timeout', detail: detail ?? 'never probed' };
    // A probe never outlives the grace period.
    const timeoutMs = Math.min(target.timeoutMs, remaining);
    const result = await probe({ ...target, timeoutMs }, signal);
    if (signal.aborted) break;
    if (result.healthy) return { outcome: 'healthy' };
    // One the deadline cut short tells only that the time ran out; an earlier whole answer tells more.
    const cutShort = result.timedOut && timeoutMs < target.timeoutMs;
    if (!cutShort || detail === undefined) detail = result.detail;
    onFailure?.({ detail: describeProbe(target, detail), tries: ++tries, elapsedMs: Date.now() - started });
    if (!await pause(Math.min(settings.startupIntervalMs, Math.max(0, deadline - Date.now())), signal)) break;
  }
  return { outcome: 'aborted' };
}

/** Probes every intervalMs; resolves with the last failure once failureThreshold fail in a row, or undefined when aborted. */
export async function watchUntilUnhealthy(
  target: HealthTarget, settings: ProbeSettings, signal: AbortSignal,
): Promise<string | undefined> {
  let failures = 0;
  while (await pause(settings.intervalMs, signal)) {
    const result = await probe(target, signal);
    if (signal.aborted) return undefined;
    failures = result.healthy ? 0 : failures + 1;
    if (failures >= settings.failureThreshold) return `${failures} failed health checks in a row, last: ${result.detail}`;
  }
  return undefined;
}

/** Sleeps; false when aborted. */
export async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}
