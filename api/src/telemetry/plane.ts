// The export to the owners' telemetries as main.ts composes it: the export itself (telemetry.enabled),
// which reads who names which telemetry (sources.ts), and the instances' output it is given: a version's
// lines followed over the agents' links where placement runs (log-feed.ts), else a failed instance's last lines.
import type { Registry } from 'prom-client';
import type { AgentHub } from '../control/agents/hub.ts';
import { documentOf, type FunctionsRepo } from '../control/functions/repo.ts';
import type { FunctionsService } from '../control/functions/service.ts';
import type { InstancesService } from '../control/instances/service.ts';
import type { LogsService } from '../control/logs/service.ts';
import type { TelemetriesService } from '../control/telemetries/service.ts';
import type { Logger } from '../logger.ts';
import { TelemetryExport } from './export.ts';
import { PlacementLogFeed } from './log-feed.ts';
import type { TelemetrySettings } from './settings.ts';
import { telemetrySources, type TelemetrySourcesOptions } from './sources.ts';

export interface TelemetryExportParts {
  settings: TelemetrySettings;
  log: Logger;
  registry: Registry;
  functionsRepo: FunctionsRepo;
  functions: Pick<FunctionsService, 'secretsOf'>;
  telemetries: Pick<TelemetriesService, 'targetsOf'>;
  /** A task's telemetries (the tasks plane is made after the export, hence a callback). */
  taskTelemetries: TelemetrySourcesOptions['task'];
}

/** The export, or undefined when telemetry is off. */
export function createTelemetryExport(parts: TelemetryExportParts): TelemetryExport | undefined {
  if (!parts.settings.enabled) return undefined;
  return new TelemetryExport({
    settings: parts.settings, log: parts.log, registry: parts.registry,
    sources: telemetrySources({
      functionsRepo: parts.functionsRepo, functionSecrets: parts.functions.secretsOf, targets: parts.telemetries.targetsOf,
      task: parts.taskTelemetries,
    }),
  });
}

export interface InstanceLogsExportParts {
  telemetryExport?: TelemetryExport;
  functionsRepo: FunctionsRepo;
  logs: Pick<LogsService, 'clusterIdsOf'>;
  hub: Pick<AgentHub, 'logs'>;
  instances: Pick<InstancesService, 'onReady' | 'onOutput'>;
  now: () => Date;
  log: Logger;
}

/**
 * Sends the instances' output to the export. Returns the log feed, which roles/placement.ts starts and stops
 * with placement's term (undefined when telemetry is off).
 */
export function exportInstanceLogs(parts: InstanceLogsExportParts): PlacementLogFeed | undefined {
  const { telemetryExport, instances } = parts;
  // Where placement runs, a version whose logs go to a telemetry has its lines followed.
  const logFeed = telemetryExport && new PlacementLogFeed({
    logsOwner: async (versionId) => {
      const row = await parts.functionsRepo.findVersionById(versionId);
      return row && documentOf(row).telemetries?.logsTelemetryId ? row.nca_id : undefined;
    },
    clustersOf: parts.logs.clusterIdsOf,
    follow: (clusterIds, query, follower) => parts.hub.logs.follow(clusterIds, query, follower),
    exportLines: (versionId, lines) => telemetryExport.exportLogLines(versionId, lines), now: parts.now, log: parts.log,
  });
  instances.onReady((versionId, ready) => logFeed?.ready(versionId, ready));
  // A failed instance's last lines (its report's logTail) reach the export unless its version's lines stream.
  instances.onOutput((report) => logFeed?.follows(report.functionVersionId) || telemetryExport?.exportLogLines(
    report.functionVersionId, (report.logTail ?? []).map((text) => ({ text, instanceId: report.instanceId }))));
  return logFeed;
}
