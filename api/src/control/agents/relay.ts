// Agent links through any replica (compute.placement 'elected'). Every replica accepts an agent's link
// (the edge: it checks the cluster credential, as the hub does) and relays it over NATS to the replica
// that holds the placement lease, whose hub serves it as if the agent had linked there:
//
//   edge → holder  <prefix>.agents.up.<epoch>     open (link id, cluster, edge), frame (text), pong, closed
//   holder → edge  <prefix>.agents.down.<edge>    frame, ping, close — each naming the epoch of its term
//
// Both ways signed (replica-signing.ts), each for its subject, so a NATS client that is no replica can
// neither speak for an agent nor command one. A link is bound to the term it was opened in: when the
// lease changes hands the edge closes its links of the old term (1012, the agent links again at once and
// its hello reaches the new holder), and drops what a holder of another term sends. A link accepted while
// the lease is free waits, its frames kept, until a holder is seen. A frame longer than CHUNK characters
// (a desired set, a batch of log lines) goes in parts (`more`), each well under NATS's max_payload
// (1 MiB by default), joined again in order at the other end. Core NATS delivers at most once: after the
// connection to the server was lost and made again, frames may be missing, so both ends end their links
// (resync) and the agents start over with a hello.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Subscription } from '@nats-io/transport-node';
import { WebSocketServer, type WebSocket } from 'ws';
import { z } from 'zod';
import { Problem, unauthorized } from '../../domain/problem.ts';
import { bearerOf } from '../../http/auth.ts';
import { rejectUpgrade } from '../../http/upgrade.ts';
import type { ReplicaLink } from '../../invocation/replica-signing.ts';
import type { Logger } from '../../logger.ts';
import type { ClustersService } from '../clusters/service.ts';
import type { LinkSocket } from './hub.ts';

const upSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('open'), link: z.string(), edge: z.string(), clusterId: z.string() }),
  z.object({ kind: z.literal('frame'), link: z.string(), text: z.string(), more: z.literal(true).optional() }),
  z.object({ kind: z.literal('pong'), link: z.string() }),
  z.object({ kind: z.literal('closed'), link: z.string() }),
]);
const downSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('frame'), link: z.string(), epoch: z.number().int(), text: z.string(), more: z.literal(true).optional() }),
  z.object({ kind: z.literal('ping'), link: z.string(), epoch: z.number().int() }),
  z.object({ kind: z.literal('close'), link: z.string(), epoch: z.number().int(), code: z.number().int(), reason: z.string() }),
]);
type Up = z.infer<typeof upSchema>;
type Down = z.infer<typeof downSchema>;
/** What the holder tells an edge about one link; the link and the term are added on the way. */
type Command = { kind: 'frame'; text: string; more?: true } | { kind: 'ping' } | { kind: 'close'; code: number; reason: string };

const upSubject = (link: ReplicaLink, epoch: number) => `${link.subject}.up.${epoch}`;
const downSubject = (link: ReplicaLink, edge: string) => `${link.subject}.down.${edge}`;
/** Frames a link waiting for a holder keeps (an agent says hello, then reports as instances change). */
const MAX_WAITING_FRAMES = 256;
/** The WebSocket close code for "the service is restarting": the agent links again after its shortest back-off. */
const MOVED = 1012;
/** Characters of a frame per NATS message: JSON-escaped and signed, at most 3 bytes each, well under 1 MiB. */
const CHUNK = 128 * 1024;

/** A frame in parts of at most CHUNK characters, each but the last marked `more`. */
function* partsOf(text: string): Generator<{ text: string; more?: true }> {
  for (let at = 0; at === 0 || at < text.length; at += CHUNK) yield at + CHUNK < text.length ? { text: text.slice(at, at + CHUNK), more: true } : { text: text.slice(at) };
}

/** Joins a frame's parts as they come, in order: the whole frame once its last part is in. */
function joiner(): (part: { text: string; more?: true }) => string | undefined {
  let pending = '';
  return (part) => {
    pending += part.text;
    if (part.more) return undefined;
    const whole = pending;
    pending = '';
    return whole;
  };
}

function opened<T>(link: ReplicaLink, schema: z.ZodType<T>, subject: string, text: string): T | undefined {
  const value = link.signer.open(subject, text);
  const parsed = value && schema.safeParse(value.value);
  return parsed?.success ? parsed.data : undefined;
}

interface EdgeLink {
  ws: WebSocket;
  clusterId: string;
  join: ReturnType<typeof joiner>;
  /** The term it was opened in; none while it waits for a holder. */
  epoch?: number;
  waiting: string[];
}

export interface AgentEdgeOptions {
  /** subject: the installation's <prefix>.agents. */
  link: ReplicaLink;
  replicaId: string;
  clusters: ClustersService;
  log: Logger;
}

/** The replica's side that accepts agents' links and relays them to the holder. */
export function createAgentEdge({ link, replicaId, clusters, log }: AgentEdgeOptions) {
  const server = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });
  const links = new Map<string, EdgeLink>();
  let holder: number | undefined;

  const up = (epoch: number, message: Up) => {
    const subject = upSubject(link, epoch);
    link.nc.publish(subject, link.signer.sign(subject, message));
  };
  const frame = (id: string, edgeLink: EdgeLink, epoch: number, text: string) => {
    try {
      for (const part of partsOf(text)) up(epoch, { kind: 'frame', link: id, ...part });
    } catch (error) {
      log.warn({ err: error, clusterId: edgeLink.clusterId }, 'an agent frame could not be relayed; its link is closed');
      edgeLink.ws.close(1011, 'the relay to placement failed');
    }
  };
  const open = (id: string, edgeLink: EdgeLink, epoch: number) => {
    edgeLink.epoch = epoch;
    up(epoch, { kind: 'open', link: id, edge: replicaId, clusterId: edgeLink.clusterId });
    for (const text of edgeLink.waiting.splice(0)) frame(id, edgeLink, epoch, text);
  };

  const mine = downSubject(link, replicaId);
  const commands: Subscription = link.nc.subscribe(mine, {
    callback: (error, msg) => {
      if (error) return log.warn({ err: error }, 'agent relay subscription failed');
      const command: Down | undefined = opened(link, downSchema, mine, msg.string());
      if (!command) return log.warn({ subject: msg.subject }, 'an agent command not signed by a replica, or that does not decode; ignored');
      const target = links.get(command.link);
      if (!target || target.epoch !== command.epoch) return; // a holder of another term: not this link's
      if (command.kind === 'frame') {
        const whole = target.join(command);
        if (whole !== undefined) target.ws.send(whole);
      }
      else if (command.kind === 'ping') target.ws.ping();
      else target.ws.close(command.code, command.reason);
    },
  });

  function accept(ws: WebSocket, clusterId: string) {
    const id = randomUUID();
    const edgeLink: EdgeLink = { ws, clusterId, join: joiner(), waiting: [] };
    links.set(id, edgeLink);
    ws.on('message', (data) => {
      const text = data.toString();
      if (edgeLink.epoch !== undefined) return frame(id, edgeLink, edgeLink.epoch, text);
      if (edgeLink.waiting.push(text) > MAX_WAITING_FRAMES) ws.close(1013, 'no replica runs placement yet');
    });
    ws.on('pong', () => edgeLink.epoch !== undefined && up(edgeLink.epoch, { kind: 'pong', link: id }));
    ws.on('close', () => {
      links.delete(id);
      if (edgeLink.epoch !== undefined) up(edgeLink.epoch, { kind: 'closed', link: id });
    });
    if (holder !== undefined) open(id, edgeLink, holder);
  }

  return {
    /** The live holder's term as the election last saw it: links of another term close, waiting ones open. */
    holder(epoch: number | undefined) {
      if (epoch === holder) return;
      holder = epoch;
      for (const [id, edgeLink] of links) {
        if (edgeLink.epoch !== undefined) edgeLink.ws.close(MOVED, 'placement moved to another replica');
        else if (epoch !== undefined) open(id, edgeLink, epoch);
      }
    },

    /** Frames may have been lost (NATS reconnected): the relayed links end, their agents link again. */
    resync() {
      for (const edgeLink of links.values()) if (edgeLink.epoch !== undefined) edgeLink.ws.close(MOVED, 'the relay to placement was interrupted');
    },

    /** GET /v1/agents/link: 401 problem before the upgrade unless the credential is a cluster's. */
    async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
      try {
        const cluster = await clusters.authenticateAgent(bearerOf(req.headers.authorization) ?? '');
        if (!cluster) return rejectUpgrade(req, socket, unauthorized('An agent link needs its cluster\'s agent credential as bearer'));
        server.handleUpgrade(req, socket, head, (ws) => accept(ws, cluster.id));
      } catch (error) {
        log.warn({ err: error }, 'could not check an agent credential');
        rejectUpgrade(req, socket, new Problem('service-unavailable', 'The agent credential could not be checked now; try again', { headers: { 'retry-after': '5' } }));
      }
    },

    close() {
      commands.unsubscribe();
      for (const { ws } of links.values()) ws.terminate();
      server.close();
    },
  };
}

export type AgentEdge = ReturnType<typeof createAgentEdge>;

/** A link an edge relays, as the holder's hub serves it. */
class RelayedLink implements LinkSocket {
  open = true;
  readonly #down: (command: Command) => void;
  readonly #listeners = { message: [] as ((text: string) => void)[], pong: [] as (() => void)[], close: [] as (() => void)[] };
  /** Frames that came before the hub served this link (placement was still starting). */
  readonly #early: string[] = [];
  readonly #join = joiner();

  constructor(down: (command: Command) => void) {
    this.#down = down;
  }

  send(text: string): void {
    if (this.open) for (const part of partsOf(text)) this.#down({ kind: 'frame', ...part });
  }

  ping(): void {
    if (this.open) this.#down({ kind: 'ping' });
  }

  close(code: number, reason: string): void {
    if (this.open) this.#down({ kind: 'close', code, reason });
    this.ended();
  }

  /** Unanswered pings: the edge (or its agent) is gone; the edge is told, in case it is not. */
  terminate(): void {
    this.close(1001, 'the link stopped answering');
  }

  on(event: 'message' | 'pong' | 'close', listener: (text: string) => void): void {
    if (event === 'message') this.#listeners.message.push(listener);
    else this.#listeners[event].push(() => listener(''));
  }

  /** One part of a frame; the whole frame goes to the hub once its last part is in. */
  part(part: { text: string; more?: true }): void {
    const whole = this.#join(part);
    if (whole !== undefined) this.received(whole);
  }

  received(text: string): void {
    if (!this.#listeners.message.length) this.#early.push(text);
    for (const listener of this.#listeners.message) listener(text);
  }

  /** Hands the early frames to the listeners the hub has attached by now. */
  served(): void {
    for (const text of this.#early.splice(0)) this.received(text);
  }

  ponged(): void {
    for (const listener of this.#listeners.pong) listener();
  }

  ended(): void {
    if (!this.open) return;
    this.open = false;
    for (const listener of this.#listeners.close) listener();
  }
}

/**
 * On the holder, for the term `epoch`: the links the edges relay, each served by `serve` (the hub) once
 * `ready` (placement has started; frames that come before wait). close() ends them all here (the term is
 * over; the edges close them on their side when they see it).
 */
export function serveRelayedLinks(link: ReplicaLink, epoch: number, serve: (socket: LinkSocket, clusterId: string) => void, ready: Promise<unknown>, log: Logger) {
  const relayed = new Map<string, RelayedLink>();
  const subject = upSubject(link, epoch);
  const subscription = link.nc.subscribe(subject, {
    callback: (error, msg) => {
      if (error) return log.warn({ err: error }, 'agent relay subscription failed');
      const message = opened(link, upSchema, subject, msg.string());
      if (!message) return log.warn({ subject: msg.subject }, 'an agent frame not signed by a replica, or that does not decode; ignored');
      if (message.kind === 'open') return void accept(message.link, message.edge, message.clusterId);
      const target = relayed.get(message.link);
      if (message.kind === 'frame') target?.part(message);
      else if (message.kind === 'pong') target?.ponged();
      else target?.ended();
    },
  });

  function accept(id: string, edge: string, clusterId: string) {
    const to = downSubject(link, edge);
    const socket = new RelayedLink((command) => {
      try {
        link.nc.publish(to, link.signer.sign(to, { ...command, link: id, epoch } satisfies Down));
      } catch (error) {
        log.warn({ err: error, clusterId }, 'a message to an agent could not be relayed; its link is ended');
        socket.ended();
      }
    });
    relayed.set(id, socket);
    socket.on('close', () => relayed.delete(id));
    void ready.then(() => {
      if (!socket.open) return;
      serve(socket, clusterId);
      socket.served();
    }, () => socket.ended());
  }

  return {
    /** Frames may have been lost (NATS reconnected): the links end, their edges close them. */
    resync() {
      for (const socket of [...relayed.values()]) socket.close(MOVED, 'the relay to placement was interrupted');
    },
    close() {
      subscription.unsubscribe();
      for (const socket of [...relayed.values()]) socket.ended();
    },
  };
}
