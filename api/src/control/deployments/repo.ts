// Store access for deployments.
import type { Kysely, Selectable } from 'kysely';
import type { Database, DeploymentsTable } from '../../store/schema.ts';

export type DeploymentRow = Selectable<DeploymentsTable>;

export function createDeploymentsRepo(db: Kysely<Database>) {
  return {
    async insert(row: DeploymentRow): Promise<void> {
      await db.insertInto('deployments').values(row).execute();
    },
    findByVersion(ncaId: string, versionId: string): Promise<DeploymentRow | undefined> {
      return db.selectFrom('deployments').selectAll().where('nca_id', '=', ncaId).where('version_id', '=', versionId).executeTakeFirst();
    },
    findById(ncaId: string, deploymentId: string): Promise<DeploymentRow | undefined> {
      return db.selectFrom('deployments').selectAll().where('nca_id', '=', ncaId).where('deployment_id', '=', deploymentId).executeTakeFirst();
    },
    listByAccount(ncaId: string): Promise<DeploymentRow[]> {
      return db.selectFrom('deployments').selectAll().where('nca_id', '=', ncaId).execute();
    },
    /** Every deployment: what the execution plane reconciles towards. */
    listAll(): Promise<DeploymentRow[]> {
      return db.selectFrom('deployments').selectAll().orderBy('created_at').execute();
    },
    async update(deploymentId: string, changes: Partial<DeploymentRow>): Promise<void> {
      await db.updateTable('deployments').set(changes).where('deployment_id', '=', deploymentId).execute();
    },
    async delete(deploymentId: string): Promise<void> {
      await db.deleteFrom('deployments').where('deployment_id', '=', deploymentId).execute();
    },
  };
}

export type DeploymentsRepo = ReturnType<typeof createDeploymentsRepo>;
