// Secret values from the command line without putting them on it (a command line is readable by every
// local user): `NAME` takes the value of the environment variable NAME, `NAME=@path` a file's content
// (one trailing newline dropped), and `NAME=value` the value itself, for throwaway ones.
import { readFileSync } from 'node:fs';
import { CliError } from './client.ts';

export interface SecretValue {
  name: string;
  value: string;
}

export function secretValues(items: string[], env: NodeJS.ProcessEnv): SecretValue[] {
  return items.map((item) => {
    const at = item.indexOf('=');
    const name = at < 0 ? item : item.slice(0, at);
    if (!name) throw new CliError(`"${item}": a secret is NAME, NAME=@file or NAME=value`);
    if (at < 0) {
      const value = env[name];
      if (value === undefined) throw new CliError(`${name}: no environment variable ${name} holds its value (or give NAME=@file)`);
      return { name, value };
    }
    const given = item.slice(at + 1);
    return { name, value: given.startsWith('@') ? readSecretFile(name, given.slice(1)) : given };
  });
}

function readSecretFile(name: string, file: string): string {
  try {
    return readFileSync(file, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    throw new CliError(`${name}: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}
