// A browser-like WebSocket client (ws): opens a connection and reports the handshake outcome, the
// 101's headers or the refusal's status, headers and body.
import type { IncomingMessage } from 'node:http';
import { once } from 'node:events';
import WebSocket, { type ClientOptions } from 'ws';

export type Handshake =
  | { ok: true; ws: WebSocket; headers: IncomingMessage['headers']; first: Record<string, unknown> }
  | { ok: false; status: number; headers: IncomingMessage['headers']; body: string };

export async function openWebSocket(url: string, protocols: string[] = [], options: ClientOptions = {}): Promise<Handshake> {
  const ws = new WebSocket(url, protocols, { rejectUnauthorized: false, ...options });
  return new Promise((resolve, reject) => {
    let headers: IncomingMessage['headers'] = {};
    ws.once('upgrade', (response) => { headers = response.headers; });
    ws.once('unexpected-response', (_request, response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => { body += chunk; });
      response.on('end', () => {
        resolve({ ok: false, status: response.statusCode ?? 0, headers: response.headers, body });
        ws.terminate();
      });
    });
    ws.once('message', (data) => resolve({ ok: true, ws, headers, first: JSON.parse(String(data)) as Record<string, unknown> }));
    ws.once('error', reject);
  });
}

/** Sends `text` and resolves with the next message. */
export async function roundTrip(ws: WebSocket, text: string): Promise<string> {
  ws.send(text);
  const [data] = await once(ws, 'message');
  return String(data);
}

export async function closed(ws: WebSocket): Promise<number> {
  if (ws.readyState === WebSocket.CLOSED) return -1;
  const [code] = await once(ws, 'close');
  return code as number;
}

export function expectOpen(handshake: Handshake): Extract<Handshake, { ok: true }> {
  if (!handshake.ok) throw new Error(`expected a 101, got ${handshake.status}: ${handshake.body}`);
  return handshake;
}

export function expectRefused(handshake: Handshake): Extract<Handshake, { ok: false }> {
  if (handshake.ok) {
    handshake.ws.terminate();
    throw new Error('expected a refusal, got a 101');
  }
  return handshake;
}
