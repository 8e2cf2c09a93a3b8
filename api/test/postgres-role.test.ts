// The platform on a least-privilege PostgreSQL role: the grants docs/security.md gives ("A PostgreSQL role
// of its own") are run as written there, with names of the test's own; the platform starts on the role
// (its migrations included) and creates, deploys and invokes a function; as that role, what a superuser
// or a member of pg_execute_server_program / pg_read_server_files could do is refused.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import pg from 'pg';
import { POSTGRES_ADMIN_URL, postgresAvailable, tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor } from './helpers/functions.ts';
import { MANAGEMENT_SCOPES, startTestPlatform } from './helpers/platform.ts';

const DOCUMENTED_NAME = 'svc_platform';

/** The SQL blocks of the section, each as its statements (comments left out). */
function documentedGrants(): string[][] {
  const text = readFileSync(path.resolve(import.meta.dirname, '../../docs/security.md'), 'utf8');
  const section = text.split('### A PostgreSQL role of its own')[1]?.split(/\n#{2,3} /)[0] ?? '';
  return [...section.matchAll(/```sql\n([\s\S]*?)```/g)].map(([, block]) => block.split('\n')
    .filter((line) => !line.startsWith('--')).join('\n')
    .split(/;\s*$/m).map((statement) => statement.trim()).filter(Boolean));
}

/** Runs `use` on a connection to `url` (as whoever the URL names), closed afterwards. */
async function connected<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

function urlOf(database: string, role?: string): string {
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${database}`;
  if (role) url.username = role;
  return url.toString();
}

describe('the platform on a least-privilege PostgreSQL role', { skip: !(await postgresAvailable()) }, () => {
  test('the documented grants: the platform migrates, deploys and invokes; COPY TO PROGRAM, pg_authid, CREATE ROLE are refused', async () => {
    const blocks = documentedGrants();
    assert.equal(blocks.length, 2, 'docs/security.md gives two SQL blocks: the role and its database, then the schema');
    const name = `svc_role_${randomBytes(5).toString('hex')}`;
    const ours = (statement: string) => statement.replaceAll(DOCUMENTED_NAME, name);
    const dataDir = tempDir();
    try {
      await connected(POSTGRES_ADMIN_URL, async (admin) => {
        for (const statement of blocks[0]) await admin.query(ours(statement));
      });
      await connected(urlOf(name), async (admin) => {
        for (const statement of blocks[1]) await admin.query(ours(statement));
      });

      const asRole = urlOf(name, name);
      const svc = await startTestPlatform({ database: { dataDir, databaseUrl: asRole, drop: async () => {} } });
      try {
        const token = await svc.token({ scopes: [...MANAGEMENT_SCOPES, 'invoke_function'] });
        const fn = await deploy(svc, token, echoBody({ health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }));
        await waitFor(svc, token, fn, running);
        const invoked = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: token, body: { on: 'its own role' } });
        assert.equal(invoked.status, 200, invoked.text);
        assert.deepEqual(invoked.body.echo, { on: 'its own role' });
      } finally {
        await svc.close();
      }

      await connected(asRole, async (role) => {
        const refused = async (sql: string) => assert.rejects(role.query(sql), (error: { code?: string }) => {
          assert.equal(error.code, '42501', `${sql}: insufficient privilege`);
          return true;
        });
        await refused(`COPY (SELECT 1) TO PROGRAM 'true'`);
        await refused(`COPY functions FROM '/etc/passwd'`);
        await refused(`SELECT pg_read_file('/etc/passwd')`);
        await refused('SELECT rolpassword FROM pg_authid');
        await refused(`CREATE ROLE ${name}_other`);
        await refused(`CREATE DATABASE ${name}_other`);
        const { rows: [self] } = await role.query(`SELECT rolsuper, rolcreaterole, rolcreatedb,
          pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') AS reads, pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') AS runs
          FROM pg_roles WHERE rolname = current_user`);
        assert.deepEqual(self, { rolsuper: false, rolcreaterole: false, rolcreatedb: false, reads: false, runs: false });
        const { rows: tables } = await role.query(`SELECT count(*)::int AS owned FROM pg_tables WHERE schemaname = 'public' AND tableowner = current_user`);
        assert.ok(tables[0].owned > 0, 'the migrations made the tables, owned by the role');
      });
      // Another role of the server (say, another installation's) cannot even connect to the database.
      await connected(POSTGRES_ADMIN_URL, (admin) => admin.query(`CREATE ROLE ${name}_neighbour LOGIN`));
      await assert.rejects(connected(urlOf(name, `${name}_neighbour`), async () => {}), (error: { code?: string }) => error.code === '42501');
    } finally {
      await connected(POSTGRES_ADMIN_URL, async (admin) => {
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        for (const role of [name, `${name}_neighbour`]) await admin.query(`DROP ROLE IF EXISTS ${role}`);
      });
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
