// The few Docker Engine API calls the docker runtime makes, over the engine's unix socket with node:http
// (no docker CLI, no client library). API version 1.41 (Docker 20.10+), the oldest that has everything
// used here, so that both old and new engines accept the calls.
import http from 'node:http';
import { z } from 'zod';

export const DOCKER_API_VERSION = 'v1.41';

export class DockerError extends Error {
  override name = 'DockerError';
  readonly status: number;

  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** DOCKER_HOST=unix:///path, else /var/run/docker.sock. Other DOCKER_HOST schemes (tcp://) are not supported. */
export function dockerSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.DOCKER_HOST;
  if (!host) return '/var/run/docker.sock';
  if (!host.startsWith('unix://')) throw new Error(`DOCKER_HOST ${host}: only unix:// sockets are supported`);
  return host.slice('unix://'.length);
}

export interface DockerRequest {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
}

export class DockerApi {
  readonly socketPath: string;

  constructor(socketPath: string) {
    this.socketPath = socketPath;
  }

  /**
   * A call whose JSON (or empty) answer is decoded by `answer` (what the runtime reads of it). Non-2xx
   * statuses throw DockerError with the engine's message; an answer of another shape throws too.
   */
  async call(method: string, path: string, request?: DockerRequest): Promise<void>;
  async call<S extends z.ZodType>(method: string, path: string, request: DockerRequest, answer: S): Promise<z.output<S>>;
  async call(method: string, path: string, request: DockerRequest = {}, answer?: z.ZodType): Promise<unknown> {
    const response = await this.open(method, path, request);
    const text = await readText(response);
    if (response.statusCode! >= 300 && response.statusCode !== 304) throw new DockerError(response.statusCode!, engineMessage(text));
    if (!answer) return undefined;
    const decoded = answer.safeParse(text ? JSON.parse(text) : undefined);
    if (!decoded.success) throw new Error(`the container engine answered ${method} ${path} with an unexpected shape: ${decoded.error.issues[0].message}`);
    return decoded.data;
  }

  /** A call whose answer is a stream (pull progress, logs); the caller consumes it. Non-2xx throws. */
  async stream(method: string, path: string, request: DockerRequest = {}): Promise<http.IncomingMessage> {
    const response = await this.open(method, path, request);
    if (response.statusCode! >= 300) throw new DockerError(response.statusCode!, engineMessage(await readText(response)));
    return response;
  }

  open(method: string, path: string, request: DockerRequest): Promise<http.IncomingMessage> {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(request.query ?? {})) if (value !== undefined) search.set(key, String(value));
    const query = search.size ? `?${search}` : '';
    const body = request.body === undefined ? undefined : JSON.stringify(request.body);
    const headers: Record<string, string> = { ...request.headers };
    if (body !== undefined) headers['content-type'] = 'application/json';
    return new Promise((resolve, reject) => {
      const req = http.request({
        socketPath: this.socketPath, method, path: `/${DOCKER_API_VERSION}${path}${query}`, headers, agent: false,
      }, resolve);
      req.on('error', (error: NodeJS.ErrnoException) => reject(new Error(
        `container engine at unix://${this.socketPath} is not answering: ${error.code ?? error.message}`, { cause: error })));
      req.end(body);
    });
  }
}

async function readText(response: http.IncomingMessage): Promise<string> {
  let text = '';
  response.setEncoding('utf8');
  for await (const chunk of response) text += chunk;
  return text;
}

const engineError = z.object({ message: z.string() });

function engineMessage(text: string): string {
  try {
    return engineError.safeParse(JSON.parse(text)).data?.message ?? text;
  } catch {
    return text || 'no message';
  }
}

/**
 * Splits the multiplexed stream of a container without a TTY (logs, attach): frames of an 8-byte header
 * (stream type: 1 stdout, 2 stderr; three zero bytes; big-endian payload length) then the payload.
 * Frames may arrive split across chunks or several in one.
 */
export class FrameDemuxer {
  #pending: Buffer = Buffer.alloc(0);
  readonly #onFrame: (stream: 'stdout' | 'stderr', payload: Buffer) => void;

  constructor(onFrame: (stream: 'stdout' | 'stderr', payload: Buffer) => void) {
    this.#onFrame = onFrame;
  }

  push(chunk: Buffer): void {
    this.#pending = this.#pending.length ? Buffer.concat([this.#pending, chunk]) : chunk;
    while (this.#pending.length >= 8) {
      const size = this.#pending.readUInt32BE(4);
      if (this.#pending.length < 8 + size) break;
      const payload = this.#pending.subarray(8, 8 + size);
      this.#onFrame(this.#pending[0] === 2 ? 'stderr' : 'stdout', payload);
      this.#pending = this.#pending.subarray(8 + size);
    }
  }
}
