// Which version of a function takes a request, and why not. The one place that knows the rules: the
// invocation plane, the autoscaler and the streaming broker ask here instead of keeping their own copy.
import { z } from 'zod';
import type { Principal } from '../domain/principal.ts';
import { notFound, Problem } from '../domain/problem.ts';
import { documentOf, type FunctionsRepo, type VersionRow } from '../control/functions/repo.ts';

/** Statuses in which a version takes requests (DEPLOYING: its first instances are starting). */
export const TAKING_REQUESTS: ReadonlySet<string> = new Set(['ACTIVE', 'DEPLOYING', 'DEGRADING']);

export function takesRequests(status: string): boolean {
  return TAKING_REQUESTS.has(status);
}

/**
 * A STREAMING version takes sign-ins in these and in DEGRADED too: a one-instance function is briefly
 * without a ready instance whenever a session ends, and its line waits for the next.
 */
export function takesSessions(status: string): boolean {
  return TAKING_REQUESTS.has(status) || status === 'DEGRADED';
}

/** Where a resolved request goes: the version and what the container is told about it (also stored with a 202). */
export const targetSchema = z.object({
  ncaId: z.string(),
  functionId: z.string(),
  versionId: z.string(),
  functionName: z.string(),
  inferenceUrl: z.string(),
  /** The client named the version: the request never moves to another one. */
  pinned: z.boolean().optional(),
});

export type Target = z.infer<typeof targetSchema>;

export interface KnownVersion {
  status: string;
  streaming: boolean;
  target: Target;
}

/** A function's versions are read from the store at most this often on the hot path. */
const CACHE_MS = 500;

function known(row: VersionRow): KnownVersion {
  return {
    status: row.status,
    streaming: row.function_type === 'STREAMING',
    target: {
      ncaId: row.nca_id, functionId: row.function_id, versionId: row.version_id, functionName: row.name,
      inferenceUrl: documentOf(row).inferenceUrl,
    },
  };
}

function missing(functionId: string, versionId?: string, what = 'not found') {
  return notFound(`Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: ${what}`);
}

/**
 * The version a request goes to among `versions` (the one named, or a random one taking requests).
 * Unknown → 404, not deployed (INACTIVE) → 404, DEGRADED/ERROR → 503 with Retry-After.
 */
export function choose(versions: readonly KnownVersion[], functionId: string, versionId?: string): KnownVersion {
  const named = versionId ? versions.filter((version) => version.target.versionId === versionId) : versions;
  if (named.length === 0) throw missing(functionId, versionId);
  const usable = named.filter((version) => TAKING_REQUESTS.has(version.status));
  if (usable.length === 0) {
    const status = named[0].status;
    if (status === 'INACTIVE') throw missing(functionId, versionId, 'not deployed');
    throw new Problem('service-unavailable', `Function id '${functionId}' is ${status} and takes no requests now`, { headers: { 'retry-after': '5' } });
  }
  return usable.length === 1 ? usable[0] : usable[Math.floor(Math.random() * usable.length)];
}

export function createVersionResolver(functionsRepo: FunctionsRepo, clock: () => number = Date.now) {
  const cache = new Map<string, { at: number; versions: KnownVersion[] }>();

  async function versionsOf(ncaId: string, functionId: string): Promise<KnownVersion[]> {
    const key = `${ncaId}/${functionId}`;
    const cached = cache.get(key);
    if (cached && clock() - cached.at < CACHE_MS) return cached.versions;
    const versions = (await functionsRepo.listVersionsOf(ncaId, functionId)).map(known);
    cache.set(key, { at: clock(), versions });
    return versions;
  }

  return {
    /** The target of a pexec request; a STREAMING function is a 400 (it is reached over a session). */
    async resolve(principal: Principal, functionId: string, versionId?: string): Promise<Target> {
      const chosen = choose(await versionsOf(principal.ncaId, functionId), functionId, versionId);
      if (chosen.streaming) throw new Problem('bad-request', 'STREAMING functions are reached over a WebSocket session, not pexec');
      return versionId ? { ...chosen.target, pinned: true } : chosen.target;
    },

    /**
     * Where a waiting request goes now: its own version while that takes requests (or is DEGRADED, its
     * instances restarting), else another version of its function unless it was pinned. Throws the Problem
     * a new request would get when there is none (undeployed: 404; ERROR: 503).
     */
    async reroute(target: Target): Promise<Target> {
      const versions = (await versionsOf(target.ncaId, target.functionId)).filter((version) => !version.streaming);
      const own = versions.find((version) => version.target.versionId === target.versionId);
      if (own && (takesRequests(own.status) || own.status === 'DEGRADED')) return target;
      const chosen = choose(versions, target.functionId, target.pinned ? target.versionId : undefined);
      return { ...chosen.target, pinned: target.pinned };
    },

    /** The versions the queue endpoints describe (fresh from the store): the one named, or all. */
    async listed(ncaId: string, functionId: string, versionId?: string): Promise<VersionRow[]> {
      const rows = (await functionsRepo.listVersionsOf(ncaId, functionId)).filter((row) => !versionId || row.version_id === versionId);
      if (rows.length === 0) throw missing(functionId, versionId);
      return rows;
    },
  };
}

export type VersionResolver = ReturnType<typeof createVersionResolver>;
