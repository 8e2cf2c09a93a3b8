// NATS JetStream at 127.0.0.1:4222 for the tests of several API replicas. In CI it must be there;
// elsewhere its absence skips those tests with one printed line.
import net from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';

export const NATS_URL = process.env.SVC_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

let reachable: Promise<boolean> | undefined;

export function natsAvailable(): Promise<boolean> {
  reachable ??= new Promise<boolean>((resolve) => {
    const { hostname, port } = new URL(NATS_URL);
    const socket = net.connect({ host: hostname, port: Number(port || 4222) });
    socket.setTimeout(2000);
    // The server speaks first: an INFO line means a NATS server is listening.
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('INFO'));
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  }).then((up) => {
    if (up) return true;
    if (process.env.CI) throw new Error(`NATS JetStream is required in CI at ${NATS_URL}`);
    console.log(`# skipping replica tests: start NATS with JetStream on ${NATS_URL} (nats-server -js)`);
    return false;
  });
  return reachable;
}

/** Runs `use` on a connection of its own to the test NATS server, closed afterwards. */
async function withNats<T>(use: (nc: NatsConnection) => Promise<T>): Promise<T> {
  const nc = await connect({ servers: NATS_URL.replace(/^nats:\/\//, '') });
  try {
    return await use(nc);
  } finally {
    await nc.close();
  }
}

/**
 * How many tickets a version's queue stream has taken so far (its last sequence number); none before the
 * stream exists (a request that needs no ticket may run before any replica made it).
 */
export function ticketsTaken(versionId: string): Promise<number> {
  return withNats(async (nc) => {
    const info = await (await jetstreamManager(nc)).streams.info(`SVC_Q_${versionId}`).catch((error: unknown) => {
      if (error instanceof Error && error.name === 'StreamNotFoundError') return undefined;
      throw error;
    });
    return info?.state.last_seq ?? 0;
  });
}

/** Removes what a test's function version left in the shared NATS server (its queue stream, KV entries). */
export function forgetVersion(versionId: string): Promise<void> {
  return withNats(async (nc) => {
    await (await jetstreamManager(nc)).streams.delete(`SVC_Q_${versionId}`).catch(() => {});
    const kvm = new Kvm(nc);
    for (const bucket of ['svc_ready', 'svc_slots', 'svc_heads']) await (await kvm.open(bucket)).purge(versionId).catch(() => {});
  });
}
