// A function version's rate limit (wire-reference 2, `rateLimit`), checked when a request is admitted, as
// the reference's limiter does: each calling account has its own windows per version (perNcaIdRate[its
// id], else rateLimit; accounts in exemptedNcaIds are not limited unless perNcaIdRate names them), and
// perUserRate adds windows per user (the credential's owner) within an account. A request is refused
// 429 with Retry-After by the first rate whose window is full.
import { createHash } from 'node:crypto';
import type { Principal } from '../domain/principal.ts';
import type { FunctionRef } from '../domain/load.ts';
import { Problem } from '../domain/problem.ts';
import type { Logger } from '../logger.ts';
import type { RateLimit } from '../control/functions/schema.ts';
import { parseRates, type Rate } from './rates.ts';
import type { Windows } from './windows.ts';

interface Policy {
  rates: Rate[];
  exempted: ReadonlySet<string>;
  perAccount: ReadonlyMap<string, Rate[]>;
  perUser: Rate[];
}

function compile(limit: RateLimit): Policy {
  return {
    rates: parseRates(limit.rateLimit),
    exempted: new Set(limit.exemptedNcaIds ?? []),
    perAccount: new Map(Object.entries(limit.perNcaIdRate ?? {}).map(([ncaId, rates]) => [ncaId, parseRates(rates)])),
    perUser: limit.perUserRate ? parseRates(limit.perUserRate) : [],
  };
}

/** A version's policy is read from the store at most this often; a change applies within about as long. */
const POLICY_MS = 1000;

export interface RateLimiterOptions {
  /** The version's rateLimit as stored (undefined: none, or no such version). */
  rateLimitOf(versionId: string): Promise<RateLimit | undefined>;
  windows: Windows;
  log: Logger;
  now?: () => number;
}

/** Ids in counter keys: short, and only characters every store of windows takes. */
const digest = (value: string) => createHash('sha256').update(value).digest('base64url').slice(0, 22);

export function createRateLimiter(options: RateLimiterOptions) {
  const { windows, log } = options;
  const clock = options.now ?? Date.now;
  const policies = new Map<string, { at: number; policy?: Policy; refresh?: Promise<Policy | undefined> }>();

  function load(versionId: string): Promise<Policy | undefined> {
    const known = policies.get(versionId);
    if (known?.refresh) return known.refresh;
    const refresh = options.rateLimitOf(versionId).then((limit) => {
      const policy = limit && compile(limit);
      policies.set(versionId, { at: clock(), policy });
      return policy;
    }, (error: unknown) => {
      // The last policy known stays; the next request tries again.
      log.warn({ err: error, versionId }, 'could not read the rate limit of a function version');
      policies.set(versionId, { at: known?.at ?? 0, policy: known?.policy });
      return known?.policy;
    });
    policies.set(versionId, { at: known?.at ?? 0, policy: known?.policy, refresh });
    return refresh;
  }

  /** The policy known now: a stale one is used while it is read again, so only a version's first request waits. */
  function policyOf(versionId: string): Policy | undefined | Promise<Policy | undefined> {
    const known = policies.get(versionId);
    if (!known) return load(versionId);
    if (known.at === 0 && known.refresh) return known.refresh;
    if (clock() - known.at >= POLICY_MS && !known.refresh) void load(versionId);
    return known.policy;
  }

  async function check(policy: Policy, principal: Principal, ref: FunctionRef) {
    const { ncaId } = principal;
    const accountRates = policy.perAccount.get(ncaId) ?? (policy.exempted.has(ncaId) ? undefined : policy.rates);
    if (!accountRates) return;
    const account = `${ref.versionId}.a.${digest(ncaId)}`;
    for (const rate of accountRates) await take(account, rate, `for account '${ncaId}'`, ref);
    const user = `${ref.versionId}.u.${digest(`${ncaId}\n${principal.ownerId}`)}`;
    for (const rate of policy.perUser) await take(user, rate, 'for this user (perUserRate)', ref);
  }

  async function take(key: string, rate: Rate, whom: string, ref: FunctionRef) {
    const now = clock();
    const verdict = await windows.take(key, rate, now);
    if (verdict.allowed) return;
    const seconds = Math.max(1, Math.ceil(verdict.retryAfterMs / 1000));
    throw new Problem('too-many-requests', `Rate limit ${rate.text} of function version '${ref.versionId}' reached ${whom}; retry after ${seconds} s`, {
      headers: { 'retry-after': String(seconds) },
    });
  }

  return {
    /**
     * Admits one request of `principal` to the version, or throws a 429 Problem. Undefined (nothing to wait
     * for) when the version has no rate limit: the hot path of unlimited functions pays one map lookup.
     */
    admit(principal: Principal, ref: FunctionRef): Promise<void> | undefined {
      const policy = policyOf(ref.versionId);
      if (policy === undefined) return undefined;
      if (policy instanceof Promise) return policy.then((loaded) => (loaded ? check(loaded, principal, ref) : undefined));
      return check(policy, principal, ref);
    },

    close: () => windows.close(),
  };
}

export type RateLimiter = ReturnType<typeof createRateLimiter>;
