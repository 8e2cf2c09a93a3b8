// The output of each instance and task the agent runs, kept for its owner (docs/api.md, "Logs"): every
// line of stdout and stderr with the time it was written and its stream, the values of the instance's
// secrets replaced by [redacted] before the line is kept. An instance keeps at most maxBytesPerInstance
// (its oldest lines go first) and is forgotten retentionMs after it last exited; a restart under the same
// id writes on into the same log. The lines are served over the agent link (serveLogs) and followed live.
// Failure reports take an instance's last lines from here too (keepingOutput), so they are redacted as well.
import { StringDecoder } from 'node:string_decoder';
import { redactValues, secretValues } from '../logger.ts';
import type { InstanceSpec, LogLine, LogLinesMessage, LogsRequest } from './protocol.ts';
import type { OutputStream, Runtime } from './runtime.ts';

export interface OutputLogSettings {
  maxBytesPerInstance: number;
  retentionMs: number;
}

export const DEFAULT_OUTPUT_LOG_SETTINGS: OutputLogSettings = { maxBytesPerInstance: 1024 * 1024, retentionMs: 3_600_000 };

/** The longest line kept; a longer one is cut after redaction, so a cut never shows part of a secret. */
const MAX_LINE_CHARS = 8192;
/** Output without a newline is held up to this much, then kept as a line of its own. */
const MAX_PARTIAL_CHARS = 65_536;
/** What a kept line costs beside its text, for the per-instance bound. */
const LINE_OVERHEAD_BYTES = 64;
/** Lines a failure report carries (its logTail). */
const REPORT_TAIL_LINES = 50;
/** Lines per `log-lines` message of the kept history. */
const BATCH_LINES = 500;

export interface LogSelector {
  functionVersionId: string;
  instanceId?: string;
}

export interface LogQuery extends LogSelector {
  /** Epoch ms: only lines written at or after it. */
  since?: number;
  tail?: number;
}

type Follower = { selector: LogSelector; onLine(line: LogLine): void };

const selects = (selector: LogSelector, log: InstanceOutput) =>
  log.functionVersionId === selector.functionVersionId && (selector.instanceId === undefined || selector.instanceId === log.instanceId);

/** One instance's kept lines. */
export class InstanceOutput {
  readonly instanceId: string;
  readonly functionVersionId: string;
  #secrets: string[];
  readonly #maxBytes: number;
  readonly #now: () => number;
  readonly #publish: (line: LogLine) => void;
  readonly #streams = new Map<OutputStream, { decoder: StringDecoder; partial: string }>();
  #lines: LogLine[] = [];
  /** Index of the oldest kept line (dropped ones are compacted away now and then). */
  #first = 0;
  #bytes = 0;
  exitedAt: number | undefined;

  constructor(spec: InstanceSpec, maxBytes: number, now: () => number, publish: (line: LogLine) => void) {
    this.instanceId = spec.instanceId;
    this.functionVersionId = spec.functionVersionId;
    this.#secrets = secretValues(spec.secrets);
    this.#maxBytes = maxBytes;
    this.#now = now;
    this.#publish = publish;
  }

  /** A chunk of one stream: its complete lines are kept; the rest waits for its newline. */
  write(stream: OutputStream, chunk: Buffer): void {
    let state = this.#streams.get(stream);
    if (!state) this.#streams.set(stream, state = { decoder: new StringDecoder('utf8'), partial: '' });
    const parts = (state.partial + state.decoder.write(chunk)).split('\n');
    state.partial = parts.pop()!;
    for (const part of parts) this.#keep(stream, part);
    if (state.partial.length > MAX_PARTIAL_CHARS) {
      this.#keep(stream, state.partial);
      state.partial = '';
    }
  }

  /** Values to redact from now on too (a task's secrets updated while it runs). */
  redactAlso(secrets: { value: unknown }[]): void {
    this.#secrets = secretValues([...this.#secrets.map((value) => ({ value })), ...secrets]);
  }

  started(): void {
    this.exitedAt = undefined;
  }

  /** The instance has ended: what it wrote without a final newline is a line too. */
  exited(at: number): void {
    for (const [stream, state] of this.#streams) {
      const rest = state.partial + state.decoder.end();
      if (rest) this.#keep(stream, rest);
    }
    this.#streams.clear();
    this.exitedAt = at;
  }

  lines(): LogLine[] {
    return this.#lines.slice(this.#first);
  }

  lastTexts(count: number): string[] {
    return this.#lines.slice(Math.max(this.#first, this.#lines.length - count)).map((line) => line.text);
  }

  #keep(stream: OutputStream, raw: string): void {
    const clean = redactValues(raw.endsWith('\r') ? raw.slice(0, -1) : raw, this.#secrets);
    const text = clean.length > MAX_LINE_CHARS ? `${clean.slice(0, MAX_LINE_CHARS)}…` : clean;
    const line: LogLine = { instanceId: this.instanceId, timestamp: new Date(this.#now()).toISOString(), stream, text };
    this.#lines.push(line);
    this.#bytes += text.length + LINE_OVERHEAD_BYTES;
    while (this.#bytes > this.#maxBytes && this.#first < this.#lines.length - 1) {
      this.#bytes -= this.#lines[this.#first++].text.length + LINE_OVERHEAD_BYTES;
    }
    if (this.#first > 1024 && this.#first * 2 > this.#lines.length) {
      this.#lines = this.#lines.slice(this.#first);
      this.#first = 0;
    }
    this.#publish(line);
  }
}

/** Every instance's kept output on this agent. */
export class OutputLogs {
  readonly #settings: OutputLogSettings;
  readonly #now: () => number;
  readonly #logs = new Map<string, InstanceOutput>();
  readonly #followers = new Set<Follower>();

  constructor(settings: Partial<OutputLogSettings> = {}, now: () => number = Date.now) {
    this.#settings = { ...DEFAULT_OUTPUT_LOG_SETTINGS, ...settings };
    this.#now = now;
  }

  /** The log an instance writes into, the same again after a restart under its id. */
  open(spec: InstanceSpec): InstanceOutput {
    this.#sweep();
    let log = this.#logs.get(spec.instanceId);
    if (!log) {
      log = new InstanceOutput(spec, this.#settings.maxBytesPerInstance, this.#now, (line) => this.#publish(log!, line));
      this.#logs.set(spec.instanceId, log);
    }
    log.started();
    return log;
  }

  /** A running instance's secrets changed (tasks): their new values are redacted from its next lines on. */
  redactAlso(instanceId: string, secrets: { value: unknown }[]): void {
    this.#logs.get(instanceId)?.redactAlso(secrets);
  }

  exited(log: InstanceOutput): void {
    log.exited(this.#now());
  }

  /** The kept lines of the instances selected, oldest first (by time, then as written). */
  read(query: LogQuery): LogLine[] {
    this.#sweep();
    const lines: LogLine[] = [];
    for (const log of this.#logs.values()) if (selects(query, log)) lines.push(...log.lines());
    const since = query.since;
    const kept = since === undefined ? lines : lines.filter((line) => Date.parse(line.timestamp) >= since);
    kept.sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0));
    return query.tail === undefined ? kept : kept.slice(-query.tail);
  }

  /** Calls onLine with every new line of the instances selected, until the returned function is called. */
  follow(selector: LogSelector, onLine: (line: LogLine) => void): () => void {
    const follower = { selector, onLine };
    this.#followers.add(follower);
    return () => this.#followers.delete(follower);
  }

  #publish(log: InstanceOutput, line: LogLine): void {
    for (const follower of this.#followers) if (selects(follower.selector, log)) follower.onLine(line);
  }

  /** Forgets the instances that exited more than retentionMs ago. */
  #sweep(): void {
    const before = this.#now() - this.#settings.retentionMs;
    for (const [id, log] of this.#logs) if (log.exitedAt !== undefined && log.exitedAt < before) this.#logs.delete(id);
  }
}

/**
 * The runtime with every instance's output kept in `logs`; its failure reports' last lines come from
 * there (redacted) rather than from the runtime's own tail.
 */
export function keepingOutput(runtime: Runtime, logs: OutputLogs): Runtime {
  return {
    ...runtime,
    async start(spec, context) {
      const log = logs.open(spec);
      let instance;
      try {
        instance = await runtime.start(spec, { ...context, output: (stream, chunk) => log.write(stream, chunk) });
      } catch (error) {
        logs.exited(log);
        throw error;
      }
      const exited = instance.exited.then((status) => {
        logs.exited(log);
        return status;
      });
      return { ...instance, exited, logTail: () => log.lastTexts(REPORT_TAIL_LINES) };
    },
  };
}

/**
 * Answers a `logs` request: the kept lines in batches (the last `caughtUp`, and `done` unless following),
 * then, following, new lines as they come (those of one tick in one message). Returns what stops following.
 */
export function serveLogs(logs: OutputLogs, request: LogsRequest, send: (message: LogLinesMessage) => void): () => void {
  const { streamId, functionVersionId, instanceId, follow } = request;
  const selector = { functionVersionId, ...(instanceId === undefined ? {} : { instanceId }) };
  const history = logs.read({ ...selector, since: request.since === undefined ? undefined : Date.parse(request.since), tail: request.tail });
  for (let at = 0; at === 0 || at < history.length; at += BATCH_LINES) {
    const last = at + BATCH_LINES >= history.length;
    send({ type: 'log-lines', streamId, lines: history.slice(at, at + BATCH_LINES), ...(last ? { caughtUp: true, ...(follow ? {} : { done: true }) } : {}) });
  }
  if (!follow) return () => {};
  let pending: LogLine[] = [];
  const flush = () => {
    const lines = pending;
    pending = [];
    if (lines.length) send({ type: 'log-lines', streamId, lines });
  };
  const unfollow = logs.follow(selector, (line) => {
    if (pending.push(line) === 1) setImmediate(flush);
  });
  return () => {
    unfollow();
    pending = [];
  };
}
