// Helpers for the compute tests: instance specs, a captured logger, temporary state dirs, and waiting for
// reports. Everything runs for real (processes, sockets, files); nothing of ours is mocked.
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type { Agent } from '../../src/compute/agent.ts';
import type { InstanceReport, InstanceSpec, InstanceState } from '../../src/compute/protocol.ts';
import { createLogger, type Logger } from '../../src/logger.ts';
import { freeUdpRange as freeStreamingUdpRange } from '../../../streaming-app/test/helpers.ts';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const SAMPLES_CATALOG = path.join(REPO_ROOT, 'samples/images.yaml');
export const FIXTURES_CATALOG = fileURLToPath(new URL('./fixtures/images.yaml', import.meta.url));

let specs = 0;

/** A DEFAULT function instance of `image`, healthy on GET /health of its inference port. */
export function instanceSpec(image: string, overrides: Partial<InstanceSpec> = {}): InstanceSpec {
  const n = ++specs;
  return {
    instanceId: `inst-${process.pid}-${n}`,
    ncaId: 'nca-test',
    functionId: `fn-${n}`,
    functionVersionId: `fv-${n}`,
    functionName: `test-${n}`,
    functionType: 'DEFAULT',
    gpu: 'LOCAL',
    instanceType: 'LOCAL.CPU_1x',
    backend: 'svc-local',
    containerImage: image,
    containerEnvironment: [],
    secrets: [],
    inferenceUrl: '/',
    inferencePort: 8000,
    health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 },
    startupGracePeriodMs: 10_000,
    ...overrides,
  };
}

/** A STREAMING function instance (spec 4.6 shape: health on the control port). */
export function streamingSpec(image: string, overrides: Partial<InstanceSpec> = {}): InstanceSpec {
  return instanceSpec(image, {
    functionType: 'STREAMING',
    inferenceUrl: '/sign_in',
    inferencePort: 49100,
    health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8011, timeout: 'PT2S', expectedStatusCode: 200 },
    ...overrides,
  });
}

export interface CapturedLog {
  log: Logger;
  lines: string[];
}

export function captureLog(): CapturedLog {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  return { log: createLogger('debug', destination), lines };
}

export async function tempDir(name: string): Promise<{ dir: string; remove(): Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), `svc-${name}-`));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** Records every report an agent emits, and waits for states. */
export class ReportLog {
  readonly all: InstanceReport[] = [];
  /** The reports that changed their instance's state (a starting instance also reports each new health check). */
  readonly #changes: InstanceReport[] = [];
  readonly #waiters = new Set<() => void>();

  constructor(agent: Agent) {
    agent.onReport((report) => {
      if (this.last(report.instanceId)?.state !== report.state) this.#changes.push(report);
      this.all.push(report);
      for (const waiter of this.#waiters) waiter();
    });
  }

  states(instanceId: string): InstanceState[] {
    return this.#changes.filter((report) => report.instanceId === instanceId).map((report) => report.state);
  }

  last(instanceId: string): InstanceReport | undefined {
    return this.all.filter((report) => report.instanceId === instanceId).at(-1);
  }

  /** Resolves with the first report (already seen or future) for which `match` holds. */
  waitFor(match: (report: InstanceReport) => boolean, what: string, timeoutMs = 15_000): Promise<InstanceReport> {
    const found = this.all.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out waiting for ${what}; reports: ${JSON.stringify(this.all.map((r) => [r.instanceId, r.state, r.message]))}`));
      }, timeoutMs);
      const check = () => {
        const report = this.all.find(match);
        if (!report) return;
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve(report);
      };
      this.#waiters.add(check);
    });
  }

  /** The n-th (1-based) time `instanceId` entered `state`. */
  waitForState(instanceId: string, state: InstanceState, nth = 1, timeoutMs?: number): Promise<InstanceReport> {
    return this.waitFor((report) => report.instanceId === instanceId && report.state === state
      && this.#changes.filter((r) => r.instanceId === instanceId && r.state === state).indexOf(report) === nth - 1,
    `${instanceId} ${state} #${nth}`, timeoutMs);
  }
}

/** Polls `check` until it returns a value other than undefined. */
export async function eventually<T>(check: () => T | undefined | Promise<T | undefined>, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Why a test needing ffmpeg is skipped, or false. Under CI it always runs (and fails without ffmpeg). */
export function needsFfmpeg(): string | false {
  if (process.env.CI) return false;
  const found = (process.env.PATH ?? '').split(path.delimiter).some((dir) => dir && existsSync(path.join(dir, 'ffmpeg')));
  return found ? false : 'needs ffmpeg (Debian package ffmpeg) for the streaming container';
}

/** Running: neither gone nor a zombie (an orphan's zombie may linger where PID 1 does not reap). */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat[stat.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
}

/** A random block of free UDP ports (never the platform's defaults), as the streaming-app tests draw theirs. */
export async function freeUdpRange(size: number): Promise<[number, number]> {
  const { min, max } = await freeStreamingUdpRange(size);
  return [min, max];
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const response = await fetch(url, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json', ...headers } });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON (SSE)
  }
  return { status: response.status, body: parsed, headers: response.headers };
}
