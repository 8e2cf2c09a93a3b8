// The userspace link emulator: a process in the shaped link's router namespace (shaped-link.ts) that
// delays and drops the IP packets routed through it, because this kernel has no netem. socat carries
// each packet between a TUN device and this process as one UDP datagram on the namespace's loopback;
// this process holds it for its direction's delay (link-impairment.ts) and sends it back, and the kernel
// forwards it on. Node cannot open a TUN itself (that takes an ioctl), hence socat.
//
//   ip netns exec <router> node link-emulator.ts '{"browserAddress":"198.18.7.6","seed":1}'
//
// The parent talks to it over the IPC channel: it sends { impair: { down, up }, seed? } and { stats: true },
// and reads { ready: port } once, { impaired: true } after each change and { stats: {...} }.
import { createSocket, type RemoteInfo } from 'node:dgram';
import { z } from 'zod';
import { ImpairedDirection, NO_IMPAIRMENT } from './link-impairment.ts';

const impairmentSchema = z.object({
  delayMs: z.number().min(0), jitterMs: z.number().min(0), loss: z.number().min(0).max(1),
  dropPayloadTypes: z.array(z.number().int().min(0).max(127)).optional(),
});
const argsSchema = z.object({ browserAddress: z.string(), seed: z.number().int() });
const messageSchema = z.union([
  z.object({ impair: z.object({ down: impairmentSchema, up: impairmentSchema }), seed: z.number().int().optional() }),
  z.object({ stats: z.literal(true) }),
]);

type Held = { departureMs: number; packet: Buffer };

/** One direction's packets in departure order, sent back to socat when their time comes. */
class Line {
  readonly direction: ImpairedDirection;
  readonly #queue: Held[] = [];
  #timer: NodeJS.Timeout | undefined;
  readonly #send: (packet: Buffer) => void;
  /** How late packets left against their departure time, ms (this process's own scheduling delay). */
  lateMsTotal = 0;
  /** RTP packets dropped for their payload type. */
  filtered = 0;

  constructor(seed: number, send: (packet: Buffer) => void) {
    this.direction = new ImpairedDirection(NO_IMPAIRMENT, seed);
    this.#send = send;
  }

  add(packet: Buffer): void {
    const payloadType = rtpPayloadType(packet);
    if (payloadType !== undefined && this.direction.impairment.dropPayloadTypes?.includes(payloadType)) {
      this.filtered++;
      return;
    }
    const departureMs = this.direction.schedule(performance.now());
    if (departureMs === undefined) return;
    this.#queue.push({ departureMs, packet });
    if (this.#queue.length === 1) this.#arm();
  }

  #arm(): void {
    clearTimeout(this.#timer);
    const head = this.#queue[0];
    if (!head) return;
    this.#timer = setTimeout(() => this.#release(), Math.max(0, head.departureMs - performance.now()));
  }

  #release(): void {
    const now = performance.now();
    while (this.#queue.length > 0 && this.#queue[0].departureMs <= now + 0.5) {
      const { departureMs, packet } = this.#queue.shift()!;
      this.lateMsTotal += Math.max(0, now - departureMs);
      this.#send(packet);
    }
    this.#arm();
  }
}

/** The payload type of an RTP packet in a UDP/IPv4 datagram; undefined for anything else (RTCP, STUN, DTLS). */
function rtpPayloadType(packet: Buffer): number | undefined {
  if (packet[9] !== 17) return undefined;
  const udpPayload = (packet[0] & 0x0f) * 4 + 8;
  if (packet.length < udpPayload + 12 || packet[udpPayload] >> 6 !== 2) return undefined;
  const second = packet[udpPayload + 1];
  // RTCP's packet types 192-223 sit where RTP has the marker bit and payload type (RFC 5761).
  return second >= 192 && second <= 223 ? undefined : second & 0x7f;
}

function main(): void {
  const { browserAddress, seed } = argsSchema.parse(JSON.parse(process.argv[2] ?? '{}'));
  const browser = Buffer.from(browserAddress.split('.').map(Number));
  const socket = createSocket('udp4');
  let socat: RemoteInfo | undefined;
  const send = (packet: Buffer): void => {
    if (socat) socket.send(packet, socat.port, socat.address);
  };
  const down = new Line(seed, send);
  const up = new Line(seed + 1, send);
  socket.on('message', (packet, from) => {
    socat = from;
    // IPv4 only (the routes that lead here are IPv4); the destination address is at bytes 16-19.
    if (packet.length < 20 || packet[0] >> 4 !== 4) return;
    (packet.subarray(16, 20).equals(browser) ? down : up).add(packet);
  });
  process.on('message', (raw) => {
    const message = messageSchema.parse(raw);
    if ('impair' in message) {
      down.direction.impairment = message.impair.down;
      up.direction.impairment = message.impair.up;
      if (message.seed !== undefined) {
        down.direction.reseed(message.seed);
        up.direction.reseed(message.seed + 1);
      }
      process.send?.({ impaired: true });
      return;
    }
    const figures = (line: Line) => ({ passed: line.direction.passed, dropped: line.direction.dropped, filtered: line.filtered, lateMsTotal: Math.round(line.lateMsTotal) });
    process.send?.({ stats: { down: figures(down), up: figures(up) } });
  });
  // The parent going away ends this process too.
  process.on('disconnect', () => process.exit(0));
  socket.bind(0, '127.0.0.1', () => process.send?.({ ready: socket.address().port }));
}

main();
