// Which versions a new streaming session may use: the one it names, or any of the function's STREAMING
// versions that take sessions now, for the caller's account only.
import { z } from 'zod';
import type { Principal } from '../domain/principal.ts';
import { notFound, Problem } from '../domain/problem.ts';
import { documentOf, type FunctionsRepo } from '../control/functions/repo.ts';
import { takesSessions } from '../invocation/resolver.ts';

export const versionSchema = z.object({
  versionId: z.string(),
  /** The function owner's account (metrics labels). */
  ncaId: z.string(),
  name: z.string(),
  description: z.string().optional(),
  inferenceUrl: z.string(),
});

export type Version = z.infer<typeof versionSchema>;

/** The versions in order of preference; 404, 400 or 503 saying why there is none. */
export async function streamableVersions(
  repo: Pick<FunctionsRepo, 'listVersionsOf'>, principal: Principal, functionId: string, versionId?: string,
): Promise<Version[]> {
  const rows = (await repo.listVersionsOf(principal.ncaId, functionId)).filter((row) => !versionId || row.version_id === versionId);
  if (rows.length === 0) throw notFound(`Function id '${functionId}'${versionId ? `, version '${versionId}'` : ''}: not found`);
  if (rows.every((row) => row.function_type !== 'STREAMING')) throw new Problem('bad-request', `Function id '${functionId}' is not a STREAMING function; invoke it with pexec`);
  const deployable = rows.filter((row) => row.function_type === 'STREAMING' && takesSessions(row.status));
  if (deployable.length === 0 && rows.some((row) => row.status === 'ERROR')) {
    throw new Problem('service-unavailable', `Function id '${functionId}' cannot start instances (status ERROR); try again later`, { headers: { 'retry-after': '30' } });
  }
  if (deployable.length === 0) throw notFound(`Function id '${functionId}' has no deployed STREAMING version`);
  return deployable.map((row) => {
    const document = documentOf(row);
    return { versionId: row.version_id, ncaId: row.nca_id, name: row.name, description: document.description, inferenceUrl: document.inferenceUrl };
  });
}
