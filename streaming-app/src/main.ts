// Entry point of the streaming container: `node streaming-app/src/main.ts`. Node's compile cache (in the
// temporary directory) keeps the compiled code of the app and its dependencies, werift above all, so the
// next container on the same host starts about 0.2 s sooner: a freed instance is ready for the next
// person that much earlier. The cache must be on before that code loads, hence the dynamic import.
import { enableCompileCache } from 'node:module';

enableCompileCache();
await import('./container.ts');
