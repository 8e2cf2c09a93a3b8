// How a person runs this clone's CLI: the `svc` wrapper at the repository's root, by its absolute path so
// that the line works from any directory. Never `npx svc`: outside the clone npm would fetch and run an
// unrelated package of that name, a bootstrap secret included.
import { fileURLToPath } from 'node:url';

export const SVC_COMMAND = fileURLToPath(new URL('../../../svc', import.meta.url));
