// Where the export reads who names which telemetry: a function version (its id) or else a task (its id).
import { documentOf, type FunctionsRepo } from '../control/functions/repo.ts';
import type { TelemetryReferences } from '../control/telemetries/schema.ts';
import type { ExportTarget } from '../control/telemetries/service.ts';
import type { TelemetryOwner, TelemetrySources } from './export.ts';
import { versionAttributes } from './sink.ts';

export interface TelemetrySourcesOptions {
  functionsRepo: FunctionsRepo;
  functionSecrets(versionId: string): Promise<{ value: unknown }[]>;
  task(taskId: string): Promise<{ ncaId: string; telemetries: TelemetryReferences; secrets: { value: unknown }[] } | undefined>;
  targets(ncaId: string, telemetryIds: string[]): Promise<ExportTarget[]>;
}

export function telemetrySources(options: TelemetrySourcesOptions): TelemetrySources {
  return {
    async owner(id: string): Promise<TelemetryOwner | undefined> {
      const row = await options.functionsRepo.findVersionById(id);
      if (row) {
        return {
          ncaId: row.nca_id, attributes: versionAttributes({ ncaId: row.nca_id, functionId: row.function_id, versionId: id }),
          telemetries: documentOf(row).telemetries ?? {}, secrets: await options.functionSecrets(id),
        };
      }
      const task = await options.task(id);
      return task && { ...task, attributes: { 'svc.nca_id': task.ncaId, 'svc.task.id': id } };
    },
    targets: options.targets,
  };
}
