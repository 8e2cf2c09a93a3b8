// The owners' numbers composed for main.ts: the recorder the invocation routes tell of every answer (and
// that samples the planes' load), the service and its routes over the function_stats table.
import type { Kysely } from 'kysely';
import type { FunctionLoad } from '../../domain/load.ts';
import type { Logger } from '../../logger.ts';
import type { Database } from '../../store/schema.ts';
import type { FunctionsRepo } from '../functions/repo.ts';
import type { StatsDatabase } from './migration.ts';
import { StatsRecorder } from './recorder.ts';
import { createStatsRepo } from './repo.ts';
import { statsRoutes } from './routes.ts';
import { createStatsService } from './service.ts';
import type { StatsSettings } from './settings.ts';

export interface StatsPlaneOptions {
  db: Kysely<Database>;
  functionsRepo: FunctionsRepo;
  settings: StatsSettings;
  loads(): Iterable<FunctionLoad>;
  log: Logger;
  now: () => Date;
}

export function createStatsPlane(options: StatsPlaneOptions) {
  const repo = createStatsRepo(options.db.withTables<StatsDatabase>(), options.log);
  const recorder = new StatsRecorder({ repo, settings: options.settings, loads: options.loads, log: options.log, now: options.now });
  const service = createStatsService({ repo, functionsRepo: options.functionsRepo, settings: options.settings, now: options.now });
  return { recorder, routes: statsRoutes(service) };
}
