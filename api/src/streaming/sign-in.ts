// The reference's sign-in requests (wire-reference 9: header X-SVC-ABSORB: true, on any path), as an
// Express handler in front of the api host's routes, so errors leave through the one error handler.
//   POST    a session: 200 + cookie once an instance is granted, else 202 with the place in line
//           (ask again with header svc-reqid; each answer comes within streaming.answerWithinSeconds)
//   DELETE  ends the session named by svc-reqid or the cookie: 200 (the reference's clients close
//           their socket only on 200)
//   GET     the function's name and how many instances are free, for a start screen
import type { NextFunction, Request, Response } from 'express';
import { Problem } from '../domain/problem.ts';
import type { StreamingBroker } from './broker.ts';
import { CLEAR_SESSION_COOKIE, sessionCookie } from './pipe.ts';
import { isSignIn, namedBy, SESSION_HEADER } from './request.ts';

export function signInHandler(broker: StreamingBroker) {
  return async (req: Request, res: Response, next: NextFunction) => {
    if (!isSignIn(req)) return next();
    res.locals.route = '(streaming sign-in)';
    const named = namedBy(req);
    if (req.method === 'POST') {
      const admission = await broker.signIn(named);
      const granted = admission.status === 'GRANTED';
      res.status(granted ? 200 : 202).set(SESSION_HEADER, admission.sessionId);
      if (granted) res.set('set-cookie', sessionCookie(admission.sessionId));
      res.json(admission);
    } else if (req.method === 'DELETE') {
      const sessionId = await broker.signOut(named);
      res.status(200).set({ [SESSION_HEADER]: sessionId, 'set-cookie': CLEAR_SESSION_COOKIE }).json({ sessionId, status: 'ENDED' });
    } else if (req.method === 'GET') {
      res.json(await broker.describe(named));
    } else {
      throw new Problem('method-not-allowed', 'Sign-in takes POST (start or keep waiting), DELETE (end) or GET (describe)');
    }
  };
}
