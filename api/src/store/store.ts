// The store: one Kysely handle over the embedded SQLite file or PostgreSQL, migrated on open.
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import pg from 'pg';
import type { Database } from './schema.ts';

export type Dialect = 'sqlite' | 'postgres';

export interface Store {
  db: Kysely<Database>;
  dialect: Dialect;
  /** Cheap round trip used by health checks. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface StoreOptions {
  dataDir: string;
  databaseUrl?: string;
}

/** Every migration of the schema for one backend, by name (their names sort into the order they run in). */
export type Migrations = (dialect: Dialect) => Record<string, Migration>;

/** Opens the store and brings its schema up to `migrations` (the composition root says which). */
export async function openStore(options: StoreOptions, migrations: Migrations): Promise<Store> {
  const { db, dialect } = options.databaseUrl ? openPostgres(options.databaseUrl) : openSqlite(options.dataDir);
  try {
    await migrate(db, migrations(dialect));
  } catch (error) {
    await db.destroy();
    throw error;
  }
  return {
    db,
    dialect,
    async ping() {
      await sql`select 1`.execute(db);
    },
    close: () => db.destroy(),
  };
}

/**
 * Makes `dir` (and any parent it creates) readable by this user only, tightening one that exists with
 * looser modes: the data dir and the blob store hold keys, secrets and tenants' results.
 */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

function openSqlite(dataDir: string) {
  ensurePrivateDir(dataDir);
  const name = path.join(dataDir, 'svc.db');
  // SQLite makes its WAL and shared-memory files with the database file's mode, so the file is made (or
  // tightened) 0600 before SQLite opens it; files left by an older version are tightened too.
  closeSync(openSync(name, 'a', 0o600));
  for (const file of [name, `${name}-wal`, `${name}-shm`]) if (existsSync(file)) chmodSync(file, 0o600);
  const file = new SQLite(name);
  file.pragma('journal_mode = WAL');
  file.pragma('synchronous = NORMAL');
  file.pragma('foreign_keys = ON');
  // Another process (a second `svc` role on the same file) may hold the write lock briefly.
  file.pragma('busy_timeout = 5000');
  return { db: new Kysely<Database>({ dialect: new SqliteDialect({ database: file }) }), dialect: 'sqlite' as const };
}

function openPostgres(connectionString: string) {
  const pool = new pg.Pool({ connectionString, max: 10 });
  // A client losing its connection (database restart, admin termination) must not crash the process: an
  // idle one reports through the pool, a busy one through the query it was running.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return { db: new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }), dialect: 'postgres' as const };
}

async function migrate(db: Kysely<Database>, migrations: Record<string, Migration>) {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((result) => result.status === 'Error')?.migrationName;
    throw new Error(`database migration ${failed ?? ''} failed: ${(error as Error).message}`);
  }
}

/** True when a write lost a race on a unique key (same name created twice at once). */
export function isUniqueViolation(error: unknown): boolean {
  const code = (error as { code?: string } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}
