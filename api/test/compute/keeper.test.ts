// The agent's result keeper (compute/keeper.ts) between a client standing for an API replica and a real
// HTTP server standing for the instance: only signed requests pass; an answer is relayed as it comes; when
// the replica's connection goes before the answer is safe with it, the keeper asks whether to keep it, and
// then reports it whole, or ends the exchange with the instance.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { KEEPER_HEADERS, keeperToken, ResultKeeper, type KeptResult } from '../../src/compute/keeper.ts';
import type { Endpoint } from '../../src/compute/protocol.ts';
import { createLogger } from '../../src/logger.ts';
import { until } from '../helpers/wait.ts';

const KEY = 'node-key';

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

describe('the result keeper', () => {
  let instance: http.Server;
  let endpoint: Endpoint;
  let keeper: ResultKeeper;
  let origin: string;
  /** What the instance saw, per request id; `closed` when its client went before the answer ended. */
  const seen = new Map<string, { path: string; headers: http.IncomingHttpHeaders; body: string; closed?: boolean }>();
  /** Requests whose answer's second half waits for the test. */
  const held = new Map<string, () => void>();
  const orphaned: string[] = [];
  const kept: KeptResult[] = [];
  /** Connections kept open, as a replica's pool keeps them (a closed one would offer its recent answers). */
  const pool = new http.Agent({ keepAlive: true });

  before(async () => {
    instance = http.createServer(async (req, res) => {
      const id = String(req.headers['svc-reqid']);
      let body = '';
      for await (const chunk of req) body += chunk;
      const record: { path: string; headers: http.IncomingHttpHeaders; body: string; closed?: boolean } = { path: req.url ?? '', headers: req.headers, body };
      seen.set(id, record);
      res.on('close', () => { if (!res.writableFinished) record.closed = true; });
      res.writeHead(200, { 'content-type': 'text/plain', 'x-answer': id });
      res.write(`first half of ${id};`);
      if (req.url === '/slow') await new Promise<void>((resolve) => held.set(id, resolve));
      res.end('second half');
    }).listen(0, '127.0.0.1');
    await new Promise((resolve) => instance.once('listening', resolve));
    endpoint = { host: '127.0.0.1', ports: { inference: (instance.address() as AddressInfo).port, health: 0 } };
    keeper = new ResultKeeper({ endpointOf: (id) => (id === 'instance-1' ? endpoint : undefined), log: createLogger('silent') });
    origin = await keeper.listen('127.0.0.1', 0);
    keeper.linked(KEY, { orphaned: (id) => void orphaned.push(id), kept: (result) => kept.push(result) > 0 });
  });

  after(async () => {
    pool.destroy();
    await keeper.close();
    instance.closeAllConnections();
    instance.close();
  });

  /** A request as a replica sends it; `onFirst` sees the response once its first bytes came. */
  const send = (id: string, options: { path?: string; token?: string; instanceId?: string; agent?: http.Agent; limit?: number; onFirst?: (req: http.ClientRequest) => void } = {}) =>
    new Promise<Reply>((resolve, reject) => {
      const instanceId = options.instanceId ?? 'instance-1';
      const req = http.request(`${origin}${options.path ?? '/work'}`, {
        method: 'POST', agent: options.agent ?? pool,
        headers: {
          'svc-reqid': id, 'content-type': 'application/json', [KEEPER_HEADERS.instance]: instanceId,
          [KEEPER_HEADERS.token]: options.token ?? keeperToken(KEY, instanceId, id),
          ...(options.limit ? { 'svc-max-response-size-bytes': String(options.limit) } : {}),
        },
      }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => {
          body += chunk;
          options.onFirst?.(req);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ id }));
    });

  test('a request without the node\'s token is refused with a problem and never reaches an instance', async () => {
    for (const token of ['', 'forged', keeperToken('another-node-key', 'instance-1', 'r-forged')]) {
      const reply = await send('r-forged', { token });
      assert.equal(reply.status, 403);
      assert.equal(reply.headers['content-type'], 'application/problem+json');
      assert.match(JSON.parse(reply.body).detail, /API replicas only/);
    }
    // A token for another request id does not pass either.
    assert.equal((await send('r-other', { token: keeperToken(KEY, 'instance-1', 'r-forged') })).status, 403);
    assert.equal(seen.has('r-forged') || seen.has('r-other'), false);
  });

  test('a signed request reaches the instance the agent runs under its id, without the keeper\'s headers, and its answer comes back', async () => {
    const reply = await send('r-plain');
    assert.equal(reply.status, 200);
    assert.equal(reply.body, 'first half of r-plain;second half');
    assert.equal(reply.headers['x-answer'], 'r-plain');
    const request = seen.get('r-plain')!;
    assert.equal(request.body, JSON.stringify({ id: 'r-plain' }));
    assert.equal(request.headers[KEEPER_HEADERS.token], undefined);
    assert.equal(request.headers[KEEPER_HEADERS.instance], undefined);
    assert.deepEqual(orphaned, []);
  });

  test('an instance this agent does not run, or one that refuses connections: a 502 marked as never reached', async () => {
    const unknown = await send('r-unknown', { instanceId: 'instance-elsewhere' });
    assert.equal(unknown.status, 502);
    assert.equal(unknown.headers[KEEPER_HEADERS.unreachable], '1');
    const closed = http.createServer().listen(0, '127.0.0.1');
    await new Promise((resolve) => closed.once('listening', resolve));
    const port = (closed.address() as AddressInfo).port;
    closed.close();
    const saved = endpoint;
    endpoint = { host: '127.0.0.1', ports: { inference: port, health: 0 } };
    try {
      const refused = await send('r-refused');
      assert.equal(refused.status, 502);
      assert.equal(refused.headers[KEEPER_HEADERS.unreachable], '1');
    } finally {
      endpoint = saved;
    }
  });

  test('the replica goes mid-answer and the control plane says keep: the whole answer is reported, the part the replica had included', async () => {
    await assert.rejects(send('r-keep', { path: '/slow', agent: new http.Agent(), onFirst: (req) => req.destroy() }));
    await until('the keeper to ask about r-keep', async () => orphaned.includes('r-keep'));
    keeper.verdict('r-keep', true);
    assert.deepEqual(keeper.keeping(), ['r-keep']);
    held.get('r-keep')!();
    await until('the answer of r-keep to be reported', async () => kept.some((result) => result.requestId === 'r-keep'));
    const result = kept.find((one) => one.requestId === 'r-keep')!;
    assert.equal(result.answer?.status, 200);
    assert.equal(result.answer?.body.toString(), 'first half of r-keep;second half');
    assert.equal(result.answer?.headers['x-answer'], 'r-keep');
    assert.equal(seen.get('r-keep')!.closed, undefined, 'the instance answered to the end');
    assert.deepEqual(keeper.keeping(), []);
  });

  test('the replica goes mid-answer and the control plane says drop (no 202): the exchange with the instance ends', async () => {
    await assert.rejects(send('r-drop', { path: '/slow', agent: new http.Agent(), onFirst: (req) => req.destroy() }));
    await until('the keeper to ask about r-drop', async () => orphaned.includes('r-drop'));
    keeper.verdict('r-drop', false);
    await until('the instance to see its client go', async () => seen.get('r-drop')!.closed === true);
    held.get('r-drop')!();
    assert.equal(kept.some((result) => result.requestId === 'r-drop'), false);
  });

  test('a verdict not given in time drops the exchange; one given keeps it however long the answer then takes', async () => {
    const quick = new ResultKeeper({ endpointOf: () => endpoint, log: createLogger('silent'), verdictTimeoutMs: 200 });
    const asked: string[] = [];
    const reported: KeptResult[] = [];
    const quickOrigin = await quick.listen('127.0.0.1', 0);
    quick.linked(KEY, { orphaned: (id) => void asked.push(id), kept: (result) => reported.push(result) > 0 });
    const sendTo = (id: string) => new Promise<void>((resolve) => {
      const req = http.request(`${quickOrigin}/slow`, {
        method: 'POST', agent: new http.Agent(),
        headers: { 'svc-reqid': id, [KEEPER_HEADERS.instance]: 'instance-1', [KEEPER_HEADERS.token]: keeperToken(KEY, 'instance-1', id) },
      }, (res) => res.once('data', () => {
        req.destroy();
        resolve();
      }));
      req.on('error', () => {});
      req.end('{}');
    });
    try {
      await sendTo('r-unanswered');
      await until('the keeper to ask about r-unanswered', async () => asked.includes('r-unanswered'));
      await until('the unanswered exchange to be dropped', async () => seen.get('r-unanswered')?.closed === true);
      held.get('r-unanswered')!();

      await sendTo('r-long');
      await until('the keeper to ask about r-long', async () => asked.includes('r-long'));
      quick.verdict('r-long', true);
      // The answer ends well after the verdict's time-out would have run out.
      await new Promise((resolve) => setTimeout(resolve, 600));
      assert.equal(seen.get('r-long')!.closed, undefined, 'the kept exchange goes on');
      held.get('r-long')!();
      await until('r-long to be reported', async () => reported.some((result) => result.requestId === 'r-long'));
      assert.equal(reported.find((one) => one.requestId === 'r-long')!.answer?.body.toString(), 'first half of r-long;second half');
      assert.equal(reported.some((one) => one.requestId === 'r-unanswered'), false);
    } finally {
      await quick.close();
    }
  });

  test('an answer larger than the request\'s response size limit is relayed but not kept: kept, it is why there is none', async () => {
    await assert.rejects(send('r-big', { path: '/slow', limit: 10, agent: new http.Agent(), onFirst: (req) => req.destroy() }));
    await until('the keeper to ask about r-big', async () => orphaned.includes('r-big'));
    keeper.verdict('r-big', true);
    held.get('r-big')!();
    await until('r-big to be reported', async () => kept.some((result) => result.requestId === 'r-big'));
    const result = kept.find((one) => one.requestId === 'r-big')!;
    assert.equal(result.answer, undefined);
    assert.match(result.error ?? '', /larger than a node keeps \(10 bytes/);
  });

  test('the replica had the whole answer but its connection closes a moment later (it died before storing it): the answer is offered too', async () => {
    const agent = new http.Agent({ keepAlive: true });
    const reply = await send('r-late', { agent });
    assert.equal(reply.body, 'first half of r-late;second half');
    assert.equal(orphaned.includes('r-late'), false);
    agent.destroy();
    await until('the keeper to ask about r-late', async () => orphaned.includes('r-late'));
    keeper.verdict('r-late', true);
    await until('the answer of r-late to be reported', async () => kept.some((result) => result.requestId === 'r-late'));
    assert.equal(kept.find((one) => one.requestId === 'r-late')!.answer?.body.toString(), 'first half of r-late;second half');
  });
});
