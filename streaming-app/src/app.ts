// The streamed application: STREAMING_APP_COMMAND run by /bin/sh in its own process group, with the
// display, the audio sink and the frame socket in its environment. Its exit ends the session (see
// container.ts); its last output lines explain a failure.
import type { ChildProcess } from 'node:child_process';
import { exited, spawnChild, stopChild, type ChildExit } from './children.ts';
import { LineTail } from './line-tail.ts';
import type { Logger } from './logger.ts';

export class Application {
  readonly #child: ChildProcess;
  readonly #output: LineTail;
  readonly exited: Promise<ChildExit>;
  exit: ChildExit | undefined;

  constructor(command: string, env: Record<string, string>, log: Logger) {
    this.#child = spawnChild('/bin/sh', ['-c', command], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const appLog = log.child({ app: this.#child.pid });
    // stdout and stderr share one tail, so a failure line shows whichever the app used.
    const tail = new LineTail(undefined, 20);
    this.#output = tail;
    for (const stream of [this.#child.stdout, this.#child.stderr]) {
      new LineTail(stream, 1, (line) => { tail.add(line); appLog.debug({ line }, 'app output'); });
    }
    this.exited = exited(this.#child).then((exit) => { this.exit = exit; return exit; });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** "exited with code 1<when>: <its last output line>" and the like, for logs and close reasons. */
  describeExit(when = ''): string {
    const exit = this.exit;
    if (!exit) return 'running';
    const how = `${exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`}${when}`;
    const last = this.#output.last();
    return last ? `${how}: ${last}` : how;
  }

  /** A clean exit (code 0) is the user closing the app; anything else is a crash. */
  get crashed(): boolean {
    return this.exit !== undefined && (this.exit.signal !== null || this.exit.code !== 0);
  }

  stop(): Promise<void> {
    return stopChild(this.#child, 2000);
  }
}
