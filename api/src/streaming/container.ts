// The broker's two questions to a streaming container's control port (spec 4.6): can a session start
// here (`GET /v1/streaming/ready`), and here are this session's STUN/TURN credentials
// (`POST /v1/streaming/creds`).
import { request } from 'undici';
import type { ReadyInstance } from '../control/instances/service.ts';
import { Problem } from '../domain/problem.ts';
import { isLoopbackHost } from '../http/host.ts';
import type { SessionCredentials } from '../turn/server.ts';

/**
 * ready: no session started (a WebSocket that never said hello leaves it so); over: its session ended
 * and it serves no more; busy: a session is in progress (or it cannot take one now); gone: nothing answers.
 */
export type Readiness = 'ready' | 'busy' | 'over' | 'gone';

const TIMEOUTS = { headersTimeout: 1000, bodyTimeout: 1000 };

function controlUrl(instance: ReadyInstance, path: string): string | undefined {
  const port = instance.endpoint.ports.control;
  return port ? `http://${instance.endpoint.host}:${port}${path}` : undefined;
}

export async function readinessOf(instance: ReadyInstance): Promise<Readiness> {
  const url = controlUrl(instance, '/v1/streaming/ready');
  if (!url) return 'gone';
  try {
    const response = await request(url, TIMEOUTS);
    if (response.statusCode === 200) {
      await response.body.dump();
      return 'ready';
    }
    // The reference container says why it is not ready; "session over" means it will serve no more
    // sessions (spec 4.6's 500). Other containers are replaced when they exit after their session.
    const detail = await response.body.text().catch(() => '');
    return /"detail"\s*:\s*"session over/.test(detail) ? 'over' : 'busy';
  } catch {
    return 'gone';
  }
}

/**
 * The session's STUN/TURN credentials as far as they are of use to the instance: a server on the
 * platform's loopback is none at all to an instance on a network of its own (a sandbox, a container's
 * bridge even when its ports are published on the host's loopback, another host), and handing it over
 * would only hold up its ICE gathering (seen: 7 s, and 9 s to the first frame from a podman container).
 */
export function credentialsFor(instance: ReadyInstance, credentials: SessionCredentials | undefined): SessionCredentials | undefined {
  const sharesLoopback = isLoopbackHost(instance.endpoint.host) && instance.endpoint.ownLoopback !== true;
  return credentials && isLoopbackHost(credentials.stunIp) && !sharesLoopback ? undefined : credentials;
}

export async function pushCredentials(instance: ReadyInstance, credentials: SessionCredentials): Promise<void> {
  const url = controlUrl(instance, '/v1/streaming/creds');
  if (!url) throw new Problem('bad-gateway', 'The streaming instance has no control port');
  const response = await request(url, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(credentials), ...TIMEOUTS,
  });
  await response.body.dump();
  if (response.statusCode !== 200) throw new Problem('bad-gateway', `The streaming instance refused its credentials (${response.statusCode})`);
}
