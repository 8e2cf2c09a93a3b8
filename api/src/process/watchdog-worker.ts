// The watchdog thread (see watchdog.ts). It logs with its own synchronous pino to stdout, the platform
// log's destination, because the main thread's logger cannot write while the loop is blocked.
import inspector from 'node:inspector';
import { workerData } from 'node:worker_threads';
import pino from 'pino';
import type { WatchdogData } from './watchdog.ts';

const settings = workerData as WatchdogData;
const beat = new BigInt64Array(settings.heartbeat);
const log = pino({ level: settings.logLevel, base: { pid: process.pid, thread: 'watchdog' } }, pino.destination({ fd: 1, sync: true }));
const CHECK_MS = 250;
const STACK_FRAMES = 12;

let reported = false;
let inspecting = false;

setInterval(() => {
  const rssMb = Math.round(process.memoryUsage.rss() / 1048576);
  if (settings.maxRssMb > 0 && rssMb > settings.maxRssMb) {
    end({ rssMb, maxRssMb: settings.maxRssMb }, 'resident memory above guard.maxRssMb: exiting');
  }
  const blockedMs = Date.now() - Number(Atomics.load(beat, 0));
  if (blockedMs < settings.blockedMs) {
    if (reported) log.info({ blockedMs }, 'event loop running again');
    reported = false;
    return;
  }
  if (settings.exitAfterSeconds > 0 && blockedMs >= settings.exitAfterSeconds * 1000) {
    end({ blockedMs, exitAfterSeconds: settings.exitAfterSeconds }, 'event loop blocked longer than guard.exitAfterSeconds: exiting');
  }
  if (reported || inspecting) return;
  inspecting = true;
  void mainThreadStack().then((where) => {
    inspecting = false;
    reported = true;
    log.error({ blockedMs: Date.now() - Number(Atomics.load(beat, 0)), where }, 'event loop blocked');
  });
}, CHECK_MS);

function end(fields: Record<string, number>, message: string): never {
  log.fatal(fields, message);
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
}

/**
 * Where the main thread is: it is paused for an instant through the inspector (which interrupts
 * running JavaScript) and its call frames are read. Native code (a long synchronous query) cannot be
 * interrupted; then the answer is that it is not in JavaScript.
 */
async function mainThreadStack(): Promise<string[]> {
  const session = new inspector.Session();
  const post = (method: string, params?: object) => new Promise<any>((resolve, reject) => {
    session.post(method, params, (error, result) => (error ? reject(error) : resolve(result)));
  });
  const scripts = new Map<string, string>();
  try {
    session.connectToMainThread();
    session.on('Debugger.scriptParsed', (message) => scripts.set(message.params.scriptId, message.params.url));
    const paused = new Promise<any>((resolve) => session.once('Debugger.paused', (message) => resolve(message.params)));
    await post('Debugger.enable');
    await post('Debugger.pause');
    const params = await Promise.race([paused, new Promise((resolve) => setTimeout(resolve, 1000, undefined))]);
    if (!params) return ['(not in JavaScript: native code or a system call)'];
    await post('Debugger.resume');
    return (params.callFrames as any[]).slice(0, STACK_FRAMES).map((frame) =>
      `${frame.functionName || '(anonymous)'} (${scripts.get(frame.location.scriptId) ?? '?'}:${frame.location.lineNumber + 1}:${frame.location.columnNumber + 1})`);
  } catch (error) {
    return [`(stack unavailable: ${(error as Error).message})`];
  } finally {
    // Not awaited: a main thread still in native code answers only when it returns to JavaScript, and
    // a session that goes away resumes whatever it paused.
    session.disconnect();
  }
}
