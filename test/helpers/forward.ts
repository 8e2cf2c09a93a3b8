// A service that listens on loopback only (this machine's PostgreSQL, a test's nats-server), reached from
// containers on a bridge network: a TCP forwarder on every interface of the host that takes connections from
// that network's subnet only and refuses everyone else (PostgreSQL here trusts whoever reaches it).
import net from 'node:net';

export interface Forwarder {
  port: number;
  close(): Promise<void>;
}

/** Forwards connections from `subnet` (IPv4 CIDR) on a free port of the host to 127.0.0.1:`targetPort`. */
export async function forwardFromSubnet(subnet: string, targetPort: number): Promise<Forwarder> {
  const inSubnet = ipv4Matcher(subnet);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (!client.remoteAddress || !inSubnet(client.remoteAddress)) return client.destroy();
    const upstream = net.connect(targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => { client.destroy(); upstream.destroy(); });
      socket.on('close', () => sockets.delete(socket));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '0.0.0.0', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function ipv4Matcher(cidr: string): (address: string) => boolean {
  const [base, bits] = cidr.split('/');
  const mask = Number(bits) === 0 ? 0 : (~0 << (32 - Number(bits))) >>> 0;
  const value = (address: string) => address.split('.').reduce((sum, part) => ((sum << 8) + Number(part)) >>> 0, 0);
  return (address) => net.isIPv4(address) && ((value(address) & mask) >>> 0) === ((value(base) & mask) >>> 0);
}
