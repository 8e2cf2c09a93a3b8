// The store backends every repository test runs against: the embedded SQLite file, and PostgreSQL at
// 127.0.0.1:5432 (user postgres, trust). In CI PostgreSQL must be there; elsewhere its absence skips
// those cases with one printed line.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export const POSTGRES_ADMIN_URL = process.env.SVC_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface TestDatabase {
  dataDir: string;
  databaseUrl?: string;
  drop(): Promise<void>;
}

let postgresReachable: Promise<boolean> | undefined;

export function postgresAvailable(): Promise<boolean> {
  postgresReachable ??= (async () => {
    const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL, connectionTimeoutMillis: 2000 });
    try {
      await client.connect();
      await client.end();
      return true;
    } catch {
      if (process.env.CI) throw new Error(`PostgreSQL is required in CI at ${POSTGRES_ADMIN_URL}`);
      console.log('# skipping PostgreSQL cases: start PostgreSQL on 127.0.0.1:5432 (Debian: postgresql)');
      return false;
    }
  })();
  return postgresReachable;
}

export function tempDir(prefix = 'svc-test-'): string {
  return mkdtempSync(path.join(os.tmpdir(), prefix));
}

export async function createDatabase(backend: 'sqlite' | 'postgres'): Promise<TestDatabase> {
  const dataDir = tempDir();
  if (backend === 'sqlite') {
    return { dataDir, drop: async () => rmSync(dataDir, { recursive: true, force: true }) };
  }
  const name = `svc_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    dataDir,
    databaseUrl: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The backends to run a suite against here: sqlite always, postgres when reachable (always in CI). */
export async function backends(): Promise<('sqlite' | 'postgres')[]> {
  return (await postgresAvailable()) ? ['sqlite', 'postgres'] : ['sqlite'];
}
