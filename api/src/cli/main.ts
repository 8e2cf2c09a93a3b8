// The `svc` command: parses the command line, runs one command, prints one clear line on failure.
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import type { Command, CommandContext } from './command.ts';
import { autoscalerCommands } from './commands/autoscaler.ts';
import { foundationCommands } from './commands/foundation.ts';
import { functionCommands } from './commands/functions.ts';
import { logCommands } from './commands/logs.ts';
import { statsCommands } from './commands/stats.ts';
import { taskCommands } from './commands/tasks.ts';
import { loadConfig } from '../config.ts';
import { guardRole } from '../process/guard.ts';
import { loadState } from './state.ts';

const commands: Record<string, Command> = {
  ...foundationCommands, ...functionCommands, ...statsCommands, ...taskCommands, ...autoscalerCommands, ...logCommands,
};

const globalOptions: ParseArgsOptionsConfig = {
  json: { type: 'boolean', default: false },
  server: { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
};

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((name) => name.length));
  const lines = Object.entries(commands).map(([name, command]) => `  svc ${name.padEnd(width)}  ${command.summary}`);
  return ['Usage: svc <command> [options]   (--json for machine output, --server URL)', '', ...lines].join('\n');
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const words = argv.filter((arg) => !arg.startsWith('-'));
  const name = [3, 2, 1].map((n) => words.slice(0, n).join(' ')).find((candidate) => commands[candidate]);
  if (!name) {
    if (argv.length > 0 && !argv.includes('--help') && !argv.includes('-h')) {
      console.error(`svc: unknown command '${words.join(' ')}'\n\n${usage()}`);
      return 2;
    }
    console.log(usage());
    return 0;
  }
  const command = commands[name];
  try {
    const parsed = parseArgs({
      args: argv, options: { ...globalOptions, ...command.options }, allowPositionals: true, strict: true,
    });
    const values: CommandContext['values'] = parsed.values;
    if (values.help) {
      console.log(`svc ${name}${command.usage ? ` ${command.usage}` : ''}\n  ${command.summary}`);
      return 0;
    }
    if (command.role) guard(env);
    const state = loadState(env);
    if (typeof values.server === 'string') state.server = values.server;
    await command.run({
      values,
      positionals: parsed.positionals.slice(name.split(' ').length),
      env,
      state,
      print(human, data) {
        console.log(values.json ? JSON.stringify(data, null, 2) : human);
      },
    });
    return 0;
  } catch (error) {
    // One line, never a stack trace: expected failures carry their own message, others their first line.
    console.error(`svc ${name}: ${(error as Error).message.split('\n')[0]}`);
    return 1;
  }
}

/** A role runs guarded; a configuration that does not load is left for the command to refuse in one line. */
function guard(env: NodeJS.ProcessEnv) {
  let config;
  try {
    config = loadConfig(env);
  } catch {
    return;
  }
  guardRole(config.guard, config.log.level, env);
}
