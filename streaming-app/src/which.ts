// Finds an executable the way a shell would: a name with a slash is taken as it is, anything else is
// looked up on PATH. Used to choose sources and to say which Debian package is missing.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

export function which(name: string, path = process.env.PATH): string | undefined {
  const candidates = name.includes('/') ? [name] : (path ?? '').split(delimiter).filter(Boolean).map((dir) => join(dir, name));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch { /* next */ }
  }
  return undefined;
}
