// Media sockets live in STREAMING_PORT_BINDING_RANGE. Several containers may share a host, each with its
// own sub-range, so before announcing "ready" the app checks that enough ports of its range are free.
import { createSocket } from 'node:dgram';

export type PortRange = { min: number; max: number };

/** One host socket on the bind address plus one socket for the TURN allocation. */
export const PORTS_PER_SESSION = 2;

function canBind(address: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createSocket('udp4');
    socket.once('error', () => { socket.close(); resolve(false); });
    socket.bind({ port, address, exclusive: true }, () => socket.close(() => resolve(true)));
  });
}

/** Number of ports in the range that can be bound right now, stopping once `enough` are found. */
export async function countFreePorts(range: PortRange, address: string, enough = Infinity): Promise<number> {
  let free = 0;
  for (let port = range.min; port <= range.max && free < enough; port++) {
    if (await canBind(address, port)) free++;
  }
  return free;
}

export function inRange(range: PortRange, port: number): boolean {
  return port >= range.min && port <= range.max;
}
