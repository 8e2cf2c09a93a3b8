// Validation of everything the browser sends: signaling messages on the WebSocket and input events on
// the DataChannel. The message types themselves live in client/protocol.ts, shared with the client.
import { z } from 'zod';
import { CLIPBOARD_MAX_BYTES, type ClientMessage, type InputMessage } from '../client/protocol.ts';

const candidate = z.object({
  candidate: z.string().max(1024),
  sdpMid: z.string().max(64).nullish(),
  sdpMLineIndex: z.number().int().min(0).max(64).nullish(),
  usernameFragment: z.string().max(256).nullish(),
});

const clientMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('hello'), protocol: z.number().int(), resumeToken: z.string().max(256).optional(), hasPeer: z.boolean().optional() }),
  z.object({ type: z.literal('answer'), sdp: z.string().min(1).max(64 * 1024) }),
  z.object({ type: z.literal('candidate'), candidate: candidate.nullable() }),
  z.object({ type: z.literal('restart') }),
  z.object({ type: z.literal('ping'), t: z.number() }),
  z.object({ type: z.literal('bye'), reason: z.string().max(200).optional() }),
]);

const seq = z.number().int().min(0).max(2 ** 31);
const delta = z.number().finite().min(-100_000).max(100_000);
const inputMessage = z.discriminatedUnion('type', [
  z.object({ type: z.literal('pointer'), seq, t: z.number(), x: z.number().finite(), y: z.number().finite() }),
  z.object({ type: z.literal('move'), seq, t: z.number(), dx: delta, dy: delta }),
  z.object({ type: z.literal('button'), seq, t: z.number(), button: z.number().int().min(0).max(4), down: z.boolean() }),
  z.object({ type: z.literal('wheel'), seq, t: z.number(), dx: delta, dy: delta }),
  z.object({
    type: z.literal('key'), seq, t: z.number(), key: z.string().min(1).max(32),
    code: z.string().regex(/^[A-Za-z0-9]{1,32}$/).optional(), down: z.boolean().optional(), mods: z.number().int().min(0).max(15).optional(),
  }),
  z.object({ type: z.literal('text'), seq, t: z.number(), text: z.string().min(1).max(1024) }),
  z.object({
    type: z.literal('clipboard'), seq, t: z.number(),
    text: z.string().refine((text) => Buffer.byteLength(text) <= CLIPBOARD_MAX_BYTES, `at most ${CLIPBOARD_MAX_BYTES} bytes of UTF-8`),
  }),
]);

export type ParseResult<T> = { ok: true; value: T } | { ok: false; error: string };

function parseJson<T>(schema: z.ZodType<T>, raw: string): ParseResult<T> {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return { ok: false, error: 'message is not valid JSON' };
  }
  const parsed = schema.safeParse(value);
  if (parsed.success) return { ok: true, value: parsed.data };
  const issue = parsed.error.issues[0];
  return { ok: false, error: `${issue.path.join('.') || 'message'}: ${issue.message}` };
}

export function parseClientMessage(raw: string): ParseResult<ClientMessage> {
  return parseJson(clientMessage, raw);
}

export function parseInputMessage(raw: string): ParseResult<InputMessage> {
  return parseJson(inputMessage, raw);
}
