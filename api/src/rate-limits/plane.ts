// The rate limits' composition for main.ts: the limiter reads each version's rateLimit from the store and
// counts in this process, or, with API replicas on NATS, in a KV bucket they share.
import type { NatsConnection } from '@nats-io/transport-node';
import { documentOf, type FunctionsRepo } from '../control/functions/repo.ts';
import type { Logger } from '../logger.ts';
import { createRateLimiter } from './limiter.ts';
import { NatsWindows } from './nats-windows.ts';
import { MemoryWindows } from './windows.ts';

export interface RateLimitsOptions {
  functionsRepo: Pick<FunctionsRepo, 'findVersionById'>;
  /** The replicas' NATS connection and the bucket their windows live in; without it, this process counts alone. */
  shared?: { nc: NatsConnection; bucket: string };
  log: Logger;
  now: () => Date;
}

export async function createRateLimits(options: RateLimitsOptions) {
  const clock = () => options.now().getTime();
  const windows = options.shared
    ? await NatsWindows.open(options.shared.nc, options.shared.bucket, options.log, clock)
    : new MemoryWindows(clock);
  return createRateLimiter({
    windows, log: options.log, now: clock,
    rateLimitOf: async (versionId) => {
      const row = await options.functionsRepo.findVersionById(versionId);
      return row ? documentOf(row).rateLimit : undefined;
    },
  });
}
