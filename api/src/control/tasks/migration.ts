// The tasks tables: the migrations api/src/database.ts registers as '0004_tasks' and '0016_task_nodes', and
// their row types (the plane reaches them with db.withTables<TasksDatabase>()). The first is idempotent (if
// not exists), so a store that ran it before it was registered runs it again harmlessly.
import type { Generated, Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';

export interface TasksTable {
  id: string;
  nca_id: string;
  name: string;
  /** QUEUED, LAUNCHED, RUNNING, or a terminal status (schema.ts taskStatuses). */
  status: string;
  /**
   * The task as the API shows it, minus what changes without a write of the request (status, progress,
   * health, instances), as JSON text: rendered once at launch so listing is string work.
   */
  document: string;
  /** Sealed JSON of [{name, value}] (store/encryption.ts); null when the task has none. */
  secrets: string | null;
  /** Bumped on every secrets update, so the agent refreshes the secrets file of a running task. */
  secrets_revision: number;
  /** Placement, once launched. */
  cluster_id: string | null;
  /** The node of the cluster the task was launched onto (nodes.id); null on rows launched before nodes. */
  node_id: string | null;
  backend: string | null;
  location: string | null;
  instance_id: string | null;
  /** The agent's last TaskRunState for the instance; null until its agent first reported it. */
  instance_state: string | null;
  instance_created_at: string | null;
  percent_complete: number | null;
  last_heartbeat_at: string | null;
  /** healthInfo.error: why it failed, in one line. */
  error: string | null;
  created_at: string;
  /** When it left QUEUED. */
  launched_at: string | null;
  updated_at: string;
}

export interface TaskEventsTable {
  /** Order of events; auto-increment. */
  seq: Generated<number>;
  event_id: string;
  task_id: string;
  nca_id: string;
  message: string;
  created_at: string;
}

export interface TaskResultsTable {
  result_id: string;
  task_id: string;
  nca_id: string;
  /** Path below the task's SVC_RESULTS_DIR. */
  name: string;
  size: number;
  /** JSON object: {size, sha256}. */
  metadata: string;
  /** Key in the results store. */
  storage_key: string;
  created_at: string;
}

// A type alias, not an interface: Kysely's withTables<T>() needs its index signature.
export type TasksDatabase = {
  tasks: TasksTable;
  task_events: TaskEventsTable;
  task_results: TaskResultsTable;
};

export function tasksMigration(dialect: 'sqlite' | 'postgres'): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.createTable('tasks').ifNotExists()
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('document', 'text', (c) => c.notNull())
        .addColumn('secrets', 'text')
        .addColumn('secrets_revision', 'integer', (c) => c.notNull())
        .addColumn('cluster_id', 'text')
        .addColumn('backend', 'text')
        .addColumn('location', 'text')
        .addColumn('instance_id', 'text')
        .addColumn('instance_state', 'text')
        .addColumn('instance_created_at', 'text')
        .addColumn('percent_complete', 'integer')
        .addColumn('last_heartbeat_at', 'text')
        .addColumn('error', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('launched_at', 'text')
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('tasks_by_account').ifNotExists().on('tasks').columns(['nca_id', 'created_at', 'id']).execute();
      await db.schema.createIndex('tasks_by_account_status').ifNotExists().on('tasks').columns(['nca_id', 'status', 'created_at', 'id']).execute();
      await db.schema.createIndex('tasks_by_status').ifNotExists().on('tasks').columns(['status', 'created_at']).execute();
      await db.schema.createTable('task_events').ifNotExists()
        .addColumn('seq', dialect === 'postgres' ? 'serial' : 'integer', (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('event_id', 'text', (c) => c.notNull().unique())
        .addColumn('task_id', 'text', (c) => c.notNull())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('message', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('task_events_by_task').ifNotExists().on('task_events').columns(['task_id', 'seq']).execute();
      await db.schema.createTable('task_results').ifNotExists()
        .addColumn('result_id', 'text', (c) => c.primaryKey())
        .addColumn('task_id', 'text', (c) => c.notNull())
        .addColumn('nca_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('size', 'bigint', (c) => c.notNull())
        .addColumn('metadata', 'text', (c) => c.notNull())
        .addColumn('storage_key', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addUniqueConstraint('task_results_name_per_task', ['task_id', 'name'])
        .execute();
    },
  };
}

/** Each task runs on one node of its cluster. Tasks launched before have none: the first node of their cluster that links takes them. */
export function taskNodesMigration(): Migration {
  return {
    async up(db: Kysely<any>) {
      await db.schema.alterTable('tasks').addColumn('node_id', 'text').execute();
    },
  };
}
