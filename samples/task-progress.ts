// Sample task "task-progress": counts to TASK_STEPS (default 5), one step every TASK_STEP_MS (default
// 200), reporting progress as it goes, writes its result files, and exits. A task serves nothing: it runs
// to completion and its exit code is its outcome (0 → COMPLETED, anything else → ERRORED).
//
// What the platform gives a task (api/src/compute/task-env.ts):
//   SVC_PROGRESS_FILE_PATH  write {"progress": 0-100} here (write a temporary file and rename it over);
//                           each change is a heartbeat and sets the task's percentComplete
//   SVC_RESULTS_DIR         with resultHandlingStrategy UPLOAD, every file under it becomes a result
//   SVC_SECRETS_FILE        every secret as one JSON object; secrets are also environment variables
//   SVC_TASK_ID, SVC_TASK_NAME, SVC_NCA_ID
// SIGTERM (a cancel, or maxRuntimeDuration reached) asks it to stop: it writes what it has and exits 143.
//
// Knobs for trying the platform's paths: TASK_EXIT_CODE (exit with it after counting), TASK_IGNORE_SIGTERM=1
// (keep counting through SIGTERM, so the platform kills it after terminationGracePeriodDuration), and
// TASK_ECHO_ENV=<name> (print that variable, to see secret values redacted from failure events).
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const steps = Math.max(1, Number(process.env.TASK_STEPS ?? 5));
const stepMs = Math.max(0, Number(process.env.TASK_STEP_MS ?? 200));
const exitCode = Number(process.env.TASK_EXIT_CODE ?? 0);
const resultsDir = process.env.SVC_RESULTS_DIR;
const progressFile = process.env.SVC_PROGRESS_FILE_PATH;
let counted = 0;

/** Write-then-rename, so the platform never reads half a file. */
async function writeAtomically(file: string, text: string): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const temporary = `${file}.tmp`;
  await writeFile(temporary, text);
  await rename(temporary, file);
}

async function writeResults(complete: boolean): Promise<void> {
  if (!resultsDir) return;
  await writeAtomically(path.join(resultsDir, 'result.txt'), `counted to ${counted} of ${steps}${complete ? '' : ' (stopped early)'}\n`);
  await writeAtomically(path.join(resultsDir, 'steps', 'log.csv'), ['step,at', ...Array.from({ length: counted }, (_, i) => `${i + 1},${stepMs * (i + 1)}`)].join('\n') + '\n');
}

process.on('SIGTERM', () => {
  if (process.env.TASK_IGNORE_SIGTERM === '1') {
    console.log('SIGTERM received; ignoring it');
    return;
  }
  console.log(`SIGTERM received after ${counted} steps; stopping`);
  void writeResults(false).finally(() => process.exit(143));
});

console.log(`task ${process.env.SVC_TASK_NAME ?? '?'}: counting to ${steps}`);
if (process.env.TASK_ECHO_ENV) console.log(`${process.env.TASK_ECHO_ENV}=${process.env[process.env.TASK_ECHO_ENV] ?? ''}`);
for (let step = 1; step <= steps; step++) {
  await sleep(stepMs);
  counted = step;
  const progress = Math.round((step / steps) * 100);
  if (progressFile) await writeAtomically(progressFile, JSON.stringify({ progress, name: 'count', metadata: { step }, lastUpdatedAt: new Date().toISOString() }));
}
await writeResults(true);
if (exitCode !== 0) console.error(`failing on purpose with exit code ${exitCode}`);
console.log(`done: counted to ${counted}`);
process.exit(exitCode);
