// Making an instance's image present on the engine before its container is created, as `docker run
// --pull` does: `missing` (the default) pulls only an image the engine does not have, `always` pulls
// every time, `never` only uses what is there. A pull carries X-Registry-Auth from the account's registry
// credential. What can never succeed (no such image, credential refused, malformed reference) is an
// UnstartableError; anything else (registry unreachable, rate limit) may pass, so it is retried.
import type { IncomingMessage } from 'node:http';
import type { InstanceSpec } from '../protocol.ts';
import { UnstartableError } from '../runtime.ts';
import { DockerError, type DockerApi } from './docker-api.ts';
import { parseImageReference } from './image-reference.ts';
import { z } from 'zod';

export type PullPolicy = 'always' | 'missing' | 'never';

/** Pull failures that will fail again the same way. */
const PERMANENT = /not found|manifest unknown|does not exist|repository name must|unauthorized|authentication required|denied|invalid reference/i;

export async function ensureImage(api: DockerApi, spec: InstanceSpec, policy: PullPolicy): Promise<void> {
  const image = spec.containerImage!;
  if (policy !== 'always' && await present(api, image)) return;
  if (policy === 'never') throw new UnstartableError(`image ${image} is not on this host and the agent does not pull (dockerPull: never)`);
  const reference = parseImageReference(image);
  const headers: Record<string, string> = {};
  if (spec.registryAuth) headers['x-registry-auth'] = registryAuthHeader(spec.registryAuth);
  let failure: string | undefined;
  try {
    const response = await api.stream('POST', '/images/create', {
      query: { fromImage: reference.name, tag: reference.digest ?? reference.tag ?? 'latest' }, headers,
    });
    failure = await pullError(response);
  } catch (error) {
    if (!(error instanceof DockerError)) throw error;
    if (error.status === 404) throw new UnstartableError(`image ${image}: ${error.message}`);
    failure = error.message;
  }
  if (failure === undefined) return;
  if (PERMANENT.test(failure)) throw new UnstartableError(`image ${image}: ${failure}`);
  throw new Error(`pull of ${image} failed: ${failure}`);
}

async function present(api: DockerApi, image: string): Promise<boolean> {
  try {
    await api.call('GET', `/images/${image}/json`);
    return true;
  } catch (error) {
    if (error instanceof DockerError && error.status === 404) return false;
    throw error;
  }
}

const pullFailure = z.object({ error: z.string() });

/** Pull progress is JSON lines; a failure during the pull arrives as {"error": "..."} in a 200 stream. */
async function pullError(response: IncomingMessage): Promise<string | undefined> {
  let buffered = '';
  response.setEncoding('utf8');
  for await (const chunk of response) buffered += chunk;
  let failure: string | undefined;
  for (const line of buffered.split('\n')) {
    if (!line.trim()) continue;
    try {
      failure = pullFailure.safeParse(JSON.parse(line)).data?.error ?? failure;
    } catch {
      // not a progress line
    }
  }
  return failure;
}

/**
 * X-Registry-Auth: JSON {username, password, serveraddress} in URL-safe base64 with its `=` padding
 * (engines decode it with Go's padded base64.URLEncoding; unpadded, podman refuses it with "unexpected
 * EOF"). The credential's secret is base64 "user:password".
 */
export function registryAuthHeader(auth: { hostname: string; secret: string }): string {
  const decoded = Buffer.from(auth.secret, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const credentials = colon === -1
    ? { username: decoded, password: '' }
    : { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  return Buffer.from(JSON.stringify({ ...credentials, serveraddress: auth.hostname })).toString('base64')
    .replaceAll('+', '-').replaceAll('/', '_');
}
