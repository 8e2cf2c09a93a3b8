// containerArgs is one string (as in the reference API); runtimes need an argv. Shell-like splitting:
// whitespace separates, 'single' and "double" quotes group, a backslash escapes the next character
// (except inside single quotes). No variables, globs or substitutions: nothing runs through a shell.

export function splitArgs(line: string | undefined): string[] {
  const args: string[] = [];
  if (!line) return args;
  let current = '';
  let inArg = false;
  let quote: '"' | "'" | undefined;
  for (let i = 0; i < line.length; i++) {
    const char = line[i];
    if (quote) {
      if (char === quote) quote = undefined;
      else if (char === '\\' && quote === '"' && i + 1 < line.length) current += line[++i];
      else current += char;
    } else if (char === '"' || char === "'") {
      quote = char;
      inArg = true;
    } else if (char === '\\' && i + 1 < line.length) {
      current += line[++i];
      inArg = true;
    } else if (/\s/.test(char)) {
      if (inArg) args.push(current);
      current = '';
      inArg = false;
    } else {
      current += char;
      inArg = true;
    }
  }
  if (quote) throw new Error(`unterminated ${quote} quote in containerArgs`);
  if (inArg) args.push(current);
  return args;
}
