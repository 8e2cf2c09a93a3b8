// Whether a port can be had, for the listeners the platform hands to another program (coturn, the demo
// proxy), whose own failure to bind would go unnoticed or read as something else; and the one sentence
// that names the setting to change when it cannot.
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import net from 'node:net';

/** True when `host:port` can be bound right now over `protocol` (the probe lets go of it at once). */
export async function portFree(protocol: 'tcp' | 'udp', host: string, port: number): Promise<boolean> {
  const probe = protocol === 'tcp' ? net.createServer() : createSocket(host.includes(':') ? 'udp6' : 'udp4');
  try {
    if (probe instanceof net.Server) await once(probe.listen(port, host), 'listening');
    else await new Promise<void>((resolve, reject) => probe.once('error', reject).bind(port, host, resolve));
    return true;
  } catch {
    return false;
  } finally {
    probe.close();
  }
}

/** "the gateway cannot listen on 127.0.0.1:8080 (SVC_PORT): the port is in use". */
export function portInUse(what: string, where: string, setting: string): Error {
  return new Error(`${what} cannot listen on ${where} (${setting}): the port is in use`);
}
