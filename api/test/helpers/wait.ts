// Small waits shared by tests and benchmarks: poll until something holds, and a loopback port to give a child process.
import net from 'node:net';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';

/** Polls probe until it returns something truthy (and returns that); fails naming what it waited for. */
export async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value) return value;
    await sleep(50);
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A loopback port free right now, for a process we start that cannot be told to use port 0. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A bound for a wait the product promises (e.g. "the next person streams within 5 s"), stretched by how
 * overloaded this machine is right now: on a shared 2-core box at load 10 a container takes several times
 * longer to start. The time itself is measured by the benchmarks, never asserted.
 */
export function boundMs(promisedMs: number): number {
  return Math.round(promisedMs * Math.max(1, os.loadavg()[0] / os.availableParallelism()));
}
