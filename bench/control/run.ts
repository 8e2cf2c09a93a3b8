// bench/control: GET /v2/svc/functions with 10,000 functions in the account, on SQLite and on
// PostgreSQL, next to the same page fetched with one raw SQL query — both in this process (the floor of
// the store) and served by a bare node:http handler (the floor of serving it). Target: ours ≤ 1.5× raw.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { request } from '../../api/test/helpers/http.ts';
import { createDatabase } from '../../api/test/helpers/databases.ts';
import { percentile, printTable } from '../lib/report.ts';
import { servePlatform } from '../../api/test/helpers/served.ts';

const FUNCTIONS = Number(process.env.BENCH_FUNCTIONS ?? 10_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 300);
const PAGE_SIZES = [100, 1000];
const RAW_PAGE = `select * from function_versions where nca_id = 'svc-default' order by created_at desc, version_id desc limit `;

async function time(samples: number, run: () => Promise<unknown>) {
  for (let i = 0; i < 20; i++) await run();
  const durations: number[] = [];
  for (let i = 0; i < samples; i++) {
    const started = performance.now();
    await run();
    durations.push(performance.now() - started);
  }
  durations.sort((a, b) => a - b);
  return { p50: percentile(durations, 50), p99: percentile(durations, 99) };
}

/** A bare HTTP handler serving the raw query's rows as JSON: what serving the page costs at least. */
async function rawServer(query: (limit: number) => Promise<unknown[]>) {
  const server = http.createServer(async (req, res) => {
    const limit = Number(new URL(req.url!, 'http://x').searchParams.get('limit'));
    const body = JSON.stringify({ functions: await query(limit) });
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function fill(url: string, token: string) {
  let next = 0;
  const worker = async () => {
    while (next < FUNCTIONS) {
      const index = next++;
      const response = await request(url, 'POST', '/v2/svc/functions', {
        host: 'api.localhost', bearer: token,
        body: { name: `fn-${index}`, inferenceUrl: '/echo', inferencePort: 8000, containerImage: 'local/echo:1', tags: ['bench'], description: `function ${index}` },
      });
      if (response.status !== 200) throw new Error(`create: ${response.status} ${response.text}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

const rows: (string | number)[][] = [];
for (const backend of ['sqlite', 'postgres'] as const) {
  const database = await createDatabase(backend);
  const platform = await servePlatform({
    SVC_LOG_LEVEL: 'warn', SVC_ACCOUNT_MAX_FUNCTIONS: String(FUNCTIONS * 2),
    ...(database.databaseUrl ? { SVC_DATABASE_URL: database.databaseUrl } : { SVC_DATA_DIR: database.dataDir }),
  });
  const { token, apiKey } = await platform.credentials(['list_functions']);
  await fill(platform.url, token);
  let query: (limit: number) => Promise<unknown[]>;
  let closeRaw: () => Promise<void>;
  if (backend === 'sqlite') {
    // `servePlatform` keeps its store in its own data dir unless told otherwise; read that file.
    const file = new Database(path.join(platform.dataDir, 'svc.db'), { readonly: true });
    const statement = new Map(PAGE_SIZES.map((size) => [size, file.prepare(RAW_PAGE + size)]));
    query = async (limit) => statement.get(limit)!.all();
    closeRaw = async () => { file.close(); };
  } else {
    const pool = new pg.Pool({ connectionString: database.databaseUrl, max: 2 });
    // Fresh statistics, as autovacuum would have gathered on a live installation by now.
    await pool.query('analyze');
    query = async (limit) => (await pool.query(RAW_PAGE + limit)).rows;
    closeRaw = () => pool.end();
  }
  const bare = await rawServer(query);
  for (const size of PAGE_SIZES) {
    const ours = await time(SAMPLES, async () => {
      const response = await request(platform.url, 'GET', `/v2/svc/functions?limit=${size}`, { host: 'api.localhost', bearer: apiKey });
      if (response.body.functions.length !== size) throw new Error('short page');
    });
    const rawSql = await time(SAMPLES, () => query(size));
    const rawHttp = await time(SAMPLES, () => request(bare.url, 'GET', `/?limit=${size}`));
    rows.push(
      [`${backend}  page ${size}  ours (GET /v2/svc/functions)`, ours.p50, ours.p99, 1, 1],
      [`${backend}  page ${size}  raw SQL, in process`, rawSql.p50, rawSql.p99, ours.p50 / rawSql.p50, ours.p99 / rawSql.p99],
      [`${backend}  page ${size}  raw SQL served by bare node:http`, rawHttp.p50, rawHttp.p99, ours.p50 / rawHttp.p50, ours.p99 / rawHttp.p99],
    );
  }
  await bare.close();
  await closeRaw();
  await platform.stop();
  await database.drop();
}
printTable(`bench/control: ${FUNCTIONS.toLocaleString('en-US')} functions, ${SAMPLES} sequential requests per row (node ${process.version})`,
  ['backend  page  path', 'p50 ms', 'p99 ms', 'ours/raw p50', 'ours/raw p99'], rows);
console.log('target: ours ≤ 1.5× raw');
