// Host ports for instances. Several instances of one function share a host, so every instance gets its
// own TCP ports (asked of the OS) and its own block of the agent's UDP pool for media (spec 4.6 range).
import dgram from 'node:dgram';
import net from 'node:net';

/** Hands out free TCP ports, never the same one twice while it is held (the OS may repeat one before the instance binds it). */
export class TcpPortPicker {
  #held = new Set<number>();

  async take(): Promise<number> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const port = await askOsForPort();
      if (!this.#held.has(port)) {
        this.#held.add(port);
        return port;
      }
    }
    throw new Error('no free TCP port');
  }

  release(ports: Iterable<number>): void {
    for (const port of ports) this.#held.delete(port);
  }
}

function askOsForPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    // No host: the dual-stack wildcard, where a sample server will listen.
    server.listen(0, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Blocks of consecutive UDP ports from an inclusive range, e.g. 47998-48020 in blocks of 4. */
export class UdpPortPool {
  readonly range: [number, number];
  readonly blockSize: number;
  #used = new Set<number>(); // first port of each block handed out

  constructor(range: [number, number], blockSize: number) {
    if (range[0] > range[1] || blockSize < 1 || range[1] - range[0] + 1 < blockSize) {
      throw new Error(`UDP port range ${range[0]}-${range[1]} cannot hold a block of ${blockSize}`);
    }
    this.range = range;
    this.blockSize = blockSize;
  }

  /**
   * A free block, inclusive. Blocks some other process holds a port of are skipped, so a leftover or a
   * neighbour on the host does not make a streaming container fail its ready check.
   */
  async take(): Promise<[number, number]> {
    for (let first = this.range[0]; first + this.blockSize - 1 <= this.range[1]; first += this.blockSize) {
      if (this.#used.has(first)) continue;
      this.#used.add(first);
      const last = first + this.blockSize - 1;
      if (await udpBlockFree(first, last)) return [first, last];
      this.#used.delete(first);
    }
    throw new Error(`UDP port pool ${this.range[0]}-${this.range[1]} is exhausted (${this.blockSize} ports per instance)`);
  }

  release(block: [number, number]): void {
    this.#used.delete(block[0]);
  }
}

async function udpBlockFree(first: number, last: number): Promise<boolean> {
  for (let port = first; port <= last; port++) if (!await udpPortFree(port)) return false;
  return true;
}

function udpPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    socket.once('error', () => { socket.close(); resolve(false); });
    socket.bind({ port, address: '0.0.0.0', exclusive: true }, () => socket.close(() => resolve(true)));
  });
}
