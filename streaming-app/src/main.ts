// Entry point of the streaming container: `node streaming-app/src/main.ts`. Node's compile cache keeps the
// compiled code of the app and its dependencies, werift above all, so that a container starts sooner: a
// freed instance is ready for the next person that much earlier. It is NODE_COMPILE_CACHE where that is
// set (the image sets it to a cache filled at build time), else in the temporary directory, where the next
// process on the same host finds it. The cache must be on before that code loads, hence the dynamic import.
import { enableCompileCache } from 'node:module';

enableCompileCache();
await import('./container.ts');
