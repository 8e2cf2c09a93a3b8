// TURN REST credentials (coturn's use-auth-secret): username "<expiry unix seconds>:<session id>",
// password base64(HMAC-SHA1(shared secret, username)). The TURN server checks them with the same secret
// and nothing else, so every session gets its own short-lived pair without a user database.
import { createHmac } from 'node:crypto';

export interface TurnCredentials {
  username: string;
  password: string;
  expiresAt: Date;
}

export function mintTurnCredentials(secret: string, sessionId: string, ttlSeconds: number, now: Date): TurnCredentials {
  const expiry = Math.floor(now.getTime() / 1000) + ttlSeconds;
  const username = `${expiry}:${sessionId}`;
  const password = createHmac('sha1', secret).update(username).digest('base64');
  return { username, password, expiresAt: new Date(expiry * 1000) };
}
