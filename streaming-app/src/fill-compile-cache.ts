// Run once at image build time (streaming-app/Dockerfile) with NODE_COMPILE_CACHE set: loads every module
// the app loads, so that Node's compile cache in the image already holds them compiled. A fresh container
// otherwise compiles the app, werift and pino anew (about a second of CPU on this machine), and on a busy
// host that second is taken from the containers already serving sessions.
import { readdirSync } from 'node:fs';
import { enableCompileCache, flushCompileCache } from 'node:module';
import path from 'node:path';

const enabled = enableCompileCache();
if (!enabled.directory) throw new Error(`the compile cache could not be enabled: ${enabled.message ?? 'NODE_COMPILE_CACHE not set'}`);
// main.ts and container.ts start the app when loaded; they are small, and all they import is loaded here.
const starters = new Set(['main.ts', 'container.ts', path.basename(import.meta.filename)]);
for (const file of readdirSync(import.meta.dirname).filter((name) => name.endsWith('.ts') && !starters.has(name))) {
  await import(path.join(import.meta.dirname, file));
}
// The in-process encoder's bindings load at the first session's probe (libav-encoder.ts); optional.
await Promise.all([import('node-av'), import('node-av/constants')]).catch(() => {});
flushCompileCache();
console.log(`compile cache filled in ${enabled.directory}`);
