// Handing a request over to another replica as it came (compute.placement 'elected': streaming sessions
// are brokered by the placement lease's holder, so the others pass sign-ins and session WebSockets on to
// it). An upgrade is written onto a connection of its own, then both sockets are piped; a plain request is
// sent on with its headers and body, and its answer streamed back. The holder authenticates as usual.
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import type { NextFunction, Request, Response } from 'express';
import { Problem } from '../domain/problem.ts';
import { rejectUpgrade } from './upgrade.ts';

export interface ForwardTarget {
  /** The other replica's base URL (http or https). */
  url: URL;
  /** The CA its certificate is checked against (the replicas' own gateway certificate), for https. */
  ca?: string;
}

const unreachable = () => new Problem('service-unavailable', 'The replica that brokers streaming sessions could not be reached; try again', { headers: { 'retry-after': '1' } });
/** Hop-by-hop headers: they describe one connection, not the request. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'upgrade']);
const servername = (req: IncomingMessage) => req.headers.host?.replace(/:\d+$/, '');

function endToEnd(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !HOP.has(name)));
}

function connect(target: ForwardTarget, req: IncomingMessage): { socket: net.Socket; ready: string } {
  const port = Number(target.url.port) || (target.url.protocol === 'https:' ? 443 : 80);
  if (target.url.protocol !== 'https:') return { socket: net.connect({ host: target.url.hostname, port }), ready: 'connect' };
  return { socket: tls.connect({ host: target.url.hostname, port, ca: target.ca, servername: servername(req) }), ready: 'secureConnect' };
}

/** A WebSocket upgrade, handed to the target whole: its request head, what came after it, then both ways. */
export function forwardUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: ForwardTarget): void {
  const { socket: upstream, ready } = connect(target, req);
  let piped = false;
  upstream.once(ready, () => {
    piped = true;
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (let at = 0; at < req.rawHeaders.length; at += 2) lines.push(`${req.rawHeaders[at]}: ${req.rawHeaders[at + 1]}`);
    upstream.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(socket).pipe(upstream);
  });
  upstream.on('error', () => (piped ? socket.destroy() : rejectUpgrade(req, socket, unreachable())));
  upstream.on('close', () => socket.destroy());
  socket.on('error', () => upstream.destroy());
  socket.on('close', () => upstream.destroy());
}

/** A plain request, sent on with its body; the answer streams back. Rejects (before any answer) when the target cannot be reached. */
export function forwardRequest(req: IncomingMessage, res: ServerResponse, target: ForwardTarget): Promise<void> {
  return new Promise((resolve, reject) => {
    const options = { method: req.method, path: req.url, headers: endToEnd(req.headers), ca: target.ca, servername: servername(req), agent: false as const };
    const upstream = (target.url.protocol === 'https:' ? https : http).request(target.url, options, (answer) => {
      res.writeHead(answer.statusCode ?? 502, endToEnd(answer.headers));
      answer.pipe(res);
      answer.on('end', resolve);
      answer.on('error', () => res.destroy());
    });
    upstream.on('error', () => (res.headersSent ? res.destroy() : reject(unreachable())));
    req.pipe(upstream);
  });
}

/** An Express handler that hands the requests `taken` picks to `target()`, while it names one; the rest go on. */
export function forwarding(taken: (req: IncomingMessage) => boolean, target: () => ForwardTarget | undefined) {
  return (req: Request, res: Response, next: NextFunction) => {
    const to = taken(req) ? target() : undefined;
    if (!to) return next();
    res.locals.route = '(handed to another replica)';
    forwardRequest(req, res, to).catch(next);
  };
}
