#!/usr/bin/env node
// Entry point of the `svc` command. Plain JavaScript so that an old Node gets one clear line instead of
// a stack trace about .ts files.
const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(`svc needs Node.js 24 or newer; this is ${process.version}. ` +
    'Install Node 24 LTS, or run `source scripts/node24.sh` in the repository.');
  process.exit(1);
}
const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));
