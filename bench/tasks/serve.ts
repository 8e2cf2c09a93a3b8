// The platform with the task plane, in its own process for bench/tasks (so the load generator and the
// platform do not share an event loop). Until api/src/main.ts wires the task plane, `svc serve` has no
// task endpoints, so this runs startTasksPlatform (api/test/compute/tasks-platform.ts, a faithful copy of
// startPlatform plus the wiring patch). Configuration from the environment, as `svc serve`; prints one
// JSON line {url, bootstrapSecret} when listening; SIGTERM closes it.
import { loadConfig } from '../../api/src/config.ts';
import { startTasksPlatform } from '../../api/test/compute/tasks-platform.ts';

const platform = await startTasksPlatform(loadConfig(process.env), { tasks: { schedulerIntervalMs: 200 } });
console.log(JSON.stringify({ url: platform.url, bootstrapSecret: platform.bootstrapSecret }));
process.once('SIGTERM', () => void platform.close().then(() => process.exit(0)));
