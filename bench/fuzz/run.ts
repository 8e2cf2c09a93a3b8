// bench/fuzz: the management API's fuzzer (api/test/helpers/fuzz.ts) run long, on each store: FUZZ_REQUESTS
// (30,000) fuzzed creates and updates per store, FUZZ_SEED (25) to repeat a run. Prints how many answers
// had each status, then any answered 5xx or a 4xx without problem+json, and exits 1 if there were any.
// The platform runs in this process, as the tests start it.
import { backends } from '../../api/test/helpers/databases.ts';
import { FUZZ_CONFIG, fuzz, fuzzTarget } from '../../api/test/helpers/fuzz.ts';
import { startTestPlatform } from '../../api/test/helpers/platform.ts';
import { printTable } from '../lib/report.ts';

const REQUESTS = Number(process.env.FUZZ_REQUESTS ?? 30_000);
const SEED = Number(process.env.FUZZ_SEED ?? 25);

let failed = false;
for (const backend of await backends()) {
  const svc = await startTestPlatform({ backend, config: { ...FUZZ_CONFIG, log: { level: 'silent' } } });
  try {
    const started = performance.now();
    const report = await fuzz(await fuzzTarget(svc), { requests: REQUESTS, seed: SEED });
    const seconds = (performance.now() - started) / 1000;
    const rows = [...report.statuses].sort(([a], [b]) => a - b).map(([status, count]) => [String(status), count.toLocaleString('en-US')]);
    printTable(`fuzz on ${backend}: ${REQUESTS} requests, seed ${SEED}, ${seconds.toFixed(0)} s`, ['status', 'answers'], rows);
    for (const failure of report.failures) console.log(`  ${failure}`);
    failed ||= report.failures.length > 0;
  } finally {
    await svc.close();
  }
}
process.exitCode = failed ? 1 : 0;
