// Store access for deployments. The specifications column is decoded here, with the schema the API
// answers them with, so the rest of the platform sees GpuSpecification[], never text.
import type { Kysely, Selectable } from 'kysely';
import { z } from 'zod';
import type { Logger } from '../../logger.ts';
import { decodeEach, decodeJson } from '../../store/json.ts';
import type { Database, DeploymentsTable } from '../../store/schema.ts';
import { createDrainsRepo, type VersionDrainsDatabase } from './drains.ts';
import { storedGpuSpecificationSchema, type GpuSpecification } from './schema.ts';

/** A deployment as stored, its GPU specifications decoded. */
export type DeploymentRow = Omit<Selectable<DeploymentsTable>, 'specs'> & { specs: GpuSpecification[] };

const specsSchema = z.array(storedGpuSpecificationSchema);

function decode(row: Selectable<DeploymentsTable>): DeploymentRow {
  return { ...row, specs: decodeJson(specsSchema, row.specs, { table: 'deployments', key: row.deployment_id, column: 'specs' }) };
}

export function createDeploymentsRepo(db: Kysely<Database>, log: Logger) {
  const select = () => db.selectFrom('deployments').selectAll();
  return {
    async insert(row: DeploymentRow): Promise<void> {
      await db.insertInto('deployments').values({ ...row, specs: JSON.stringify(row.specs) }).execute();
    },
    async findByVersion(ncaId: string, versionId: string): Promise<DeploymentRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).where('version_id', '=', versionId).executeTakeFirst();
      return row && decode(row);
    },
    async findById(ncaId: string, deploymentId: string): Promise<DeploymentRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).where('deployment_id', '=', deploymentId).executeTakeFirst();
      return row && decode(row);
    },
    async listByAccount(ncaId: string): Promise<DeploymentRow[]> {
      return decodeEach(await select().where('nca_id', '=', ncaId).execute(), decode, log);
    },
    /** Every deployment: what placement and the autoscaler work towards. */
    async listAll(): Promise<DeploymentRow[]> {
      return decodeEach(await select().orderBy('created_at').execute(), decode, log);
    },
    async updateSpecs(deploymentId: string, specs: GpuSpecification[], at: string): Promise<void> {
      await db.updateTable('deployments').set({ specs: JSON.stringify(specs), updated_at: at }).where('deployment_id', '=', deploymentId).execute();
    },
    async delete(deploymentId: string): Promise<void> {
      await db.deleteFrom('deployments').where('deployment_id', '=', deploymentId).execute();
    },
    /** Graceful undeploys in progress (drains.ts). */
    drains: createDrainsRepo(db.withTables<VersionDrainsDatabase>()),
  };
}

export type DeploymentsRepo = ReturnType<typeof createDeploymentsRepo>;
