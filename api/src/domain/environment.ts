// Which environment variables a tenant may set for its instances and tasks. A function's
// containerEnvironment (and its secrets with variable-safe names) reach the program's environment, so a
// name that changes how a program is loaded or started (a preload library, Node's or Python's startup
// options, the search path, a shell's start-up file) would let a tenant run its own code inside a program
// the platform chose, such as a catalog entry of the process runtime. Those names are refused when a
// function or task is created, and the agent leaves them out again in case a stored one predates the rule.

/** Whole names that steer a program's loader, interpreter or shell. */
const RESERVED_NAMES = new Set([
  'PATH', 'IFS', 'ENV', 'BASH_ENV', 'SHELLOPTS', 'BASHOPTS', 'PS4', 'CDPATH',
  'GLIBC_TUNABLES', 'GCONV_PATH', 'LOCPATH', 'HOSTALIASES', 'RESOLV_HOST_CONF', 'MALLOC_CHECK_',
  'NODE_OPTIONS', 'NODE_PATH', 'NODE_REPL_EXTERNAL_MODULE', 'NODE_EXTRA_CA_CERTS', 'NODE_V8_COVERAGE', 'NODE_ICU_DATA',
  'PYTHONPATH', 'PYTHONHOME', 'PYTHONSTARTUP', 'PYTHONUSERBASE', 'PYTHONINSPECT', 'PYTHONBREAKPOINT',
  'PERL5LIB', 'PERL5OPT', 'PERLLIB', 'RUBYLIB', 'RUBYOPT',
  'JAVA_TOOL_OPTIONS', '_JAVA_OPTIONS', 'JDK_JAVA_OPTIONS',
  'OPENSSL_CONF', 'OPENSSL_ENGINES',
]);

/** Prefixes of whole families: the dynamic linker's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT…), macOS's, bash's exported functions. */
const RESERVED_PREFIXES = ['LD_', 'DYLD_', 'BASH_FUNC_'];

/** True when a tenant may not set `name` in an instance's or task's environment. */
export function isReservedEnvironmentName(name: string): boolean {
  const upper = name.toUpperCase();
  return RESERVED_NAMES.has(upper) || RESERVED_PREFIXES.some((prefix) => upper.startsWith(prefix));
}

export const RESERVED_ENVIRONMENT_MESSAGE =
  'is reserved: it changes how programs are loaded or started (PATH, LD_*, NODE_OPTIONS, PYTHONPATH and their like), so the platform sets it, not a function';
