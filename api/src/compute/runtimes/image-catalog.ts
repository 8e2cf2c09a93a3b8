// The process runtime's image catalog: a YAML file mapping image references to what to run.
//
//   images:
//     local/echo:                       # looked up by the full reference, then without :tag / @digest
//       command: ["{node}", echo.ts]    # argv; "{node}" (or a bare leading "node") = the agent's Node
//       cwd: .                          # optional, relative to the catalog's directory (the default)
//       env: { LOG_LEVEL: info }        # optional; the function's own environment wins over it
//
// Relative paths in `command` resolve against `cwd`, as they would in a shell there. The file is read
// on every start, so edits apply to the next instance without restarting the agent.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { parseImageReference } from './image-reference.ts';

const entrySchema = z.object({
  command: z.array(z.string()).min(1),
  cwd: z.string().optional(),
  env: z.record(z.string(), z.coerce.string()).optional(),
});
const catalogSchema = z.object({ images: z.record(z.string(), entrySchema) });

export interface CatalogEntry {
  command: string[];
  cwd: string;
  env: Record<string, string>;
}

/** The entry for `reference`, or undefined when the catalog has none. Throws when the file is unreadable or malformed. */
export async function lookUpImage(catalogFile: string, reference: string): Promise<CatalogEntry | undefined> {
  const catalog = await readCatalog(catalogFile);
  const entry = catalog.images[reference] ?? catalog.images[parseImageReference(reference).name];
  if (!entry) return undefined;
  const cwd = path.resolve(path.dirname(catalogFile), entry.cwd ?? '.');
  const command = entry.command.map((arg, index) =>
    arg === '{node}' || (index === 0 && arg === 'node') ? process.execPath : arg.replaceAll('{node}', process.execPath));
  return { command, cwd, env: entry.env ?? {} };
}

async function readCatalog(catalogFile: string): Promise<z.infer<typeof catalogSchema>> {
  let raw: unknown;
  try {
    raw = parseYaml(await readFile(catalogFile, 'utf8'));
  } catch (error) {
    throw new Error(`image catalog ${catalogFile}: ${(error as Error).message.split('\n')[0]}`);
  }
  const parsed = catalogSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`image catalog ${catalogFile}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data;
}
