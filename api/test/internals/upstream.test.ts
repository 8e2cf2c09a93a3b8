// The hot path's HTTP/1.1 client (invocation/upstream.ts, response-reader.ts) against real sockets: raw
// TCP servers answer byte for byte what each case needs, split across reads where framing is at stake.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { UpstreamPool, type UpstreamRequest } from '../../src/invocation/upstream.ts';

interface Answer {
  status: number;
  headers: Record<string, string | string[]>;
  body: string;
}

/** A TCP server that reads each request head (and its content-length body) and answers with `answer`. */
async function rawServer(t: { after(fn: () => unknown): void }, answer: (socket: net.Socket, request: string) => void | Promise<void>) {
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    sockets.push(socket);
    let pending = '';
    socket.on('data', (data) => {
      pending += data.toString('latin1');
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end < 0) return;
        const length = Number(/content-length: (\d+)/i.exec(pending.slice(0, end))?.[1] ?? 0);
        if (pending.length < end + 4 + length) return;
        const request = pending.slice(0, end + 4 + length);
        pending = pending.slice(end + 4 + length);
        void answer(socket, request);
      }
    });
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  return { origin: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, connections: () => sockets.length };
}

/** Writes `parts` one by one, a moment apart, so the client reads them separately. */
async function dribble(socket: net.Socket, parts: string[]) {
  for (const part of parts) {
    socket.write(part);
    await sleep(5);
  }
}

const POST: UpstreamRequest = { method: 'POST', path: '/echo', headerLines: 'content-type: text/plain\r\nsvc-reqid: r1\r\n', body: Buffer.from('hello') };

function send(pool: UpstreamPool, request: UpstreamRequest = POST, onChunk?: (chunk: Buffer) => boolean): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let head: Omit<Answer, 'body'> | undefined;
    const chunks: Buffer[] = [];
    pool.dispatch(request, {
      head: (status, headers) => { head = { status, headers }; },
      data: (chunk) => { chunks.push(chunk); return onChunk?.(chunk) ?? true; },
      end: () => resolve({ ...head!, body: Buffer.concat(chunks).toString() }),
      error: reject,
    });
  });
}

test('the request goes out as one head with host and content-length, then its body', async (t) => {
  let seen = '';
  const { origin } = await rawServer(t, (socket, request) => {
    seen = request;
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok');
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  assert.equal((await send(pool)).body, 'ok');
  assert.equal(seen, `POST /echo HTTP/1.1\r\nhost: ${origin.slice(7)}\r\ncontent-type: text/plain\r\nsvc-reqid: r1\r\ncontent-length: 5\r\n\r\nhello`);
  await send(pool, { method: 'GET', path: '/x?y=1', headerLines: '', body: Buffer.alloc(0) });
  assert.equal(seen, `GET /x?y=1 HTTP/1.1\r\nhost: ${origin.slice(7)}\r\n\r\n`, 'no content-length for a GET without a body');
});

test('a head split across reads; repeated headers become arrays; the connection is kept for the next request', async (t) => {
  const { origin, connections } = await rawServer(t, (socket) => dribble(socket, [
    'HTTP/1.1 201 Created\r\nContent-Ty', 'pe: text/plain\r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nContent-Length: 10\r', '\n\r\n01234', '56789',
  ]));
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  const first = await send(pool);
  assert.deepEqual(first, { status: 201, headers: { 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'], 'content-length': '10' }, body: '0123456789' });
  await sleep(5); // a finished connection is reused from the next turn of the loop
  assert.equal((await send(pool)).body, '0123456789');
  assert.equal(connections(), 1);
});

test('a chunked body, its sizes, extensions and trailers split at every byte', async (t) => {
  const wire = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n, chunked!\r\n0\r\nx-trailer: t\r\n\r\n';
  const { origin } = await rawServer(t, async (socket) => {
    for (const byte of wire) socket.write(byte);
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  assert.equal((await send(pool)).body, 'hello, chunked!');
  assert.equal((await send(pool)).body, 'hello, chunked!', 'the connection still reads the next response right');
});

test('a body read to the end of the connection, informational answers skipped, bodyless answers', async (t) => {
  const { origin, connections } = await rawServer(t, (socket, request) => {
    if (request.startsWith('HEAD')) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n');
    else if (request.startsWith('DELETE')) socket.write('HTTP/1.1 204 No Content\r\n\r\n');
    else socket.end('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil the end');
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  const closeDelimited = await send(pool);
  assert.deepEqual([closeDelimited.status, closeDelimited.body], [200, 'until the end']);
  assert.deepEqual(await send(pool, { method: 'HEAD', path: '/', headerLines: '', body: Buffer.alloc(0) }), { status: 200, headers: { 'content-length': '100' }, body: '' });
  await sleep(5);
  assert.deepEqual((await send(pool, { method: 'DELETE', path: '/', headerLines: '', body: Buffer.alloc(0) })).status, 204);
  assert.equal(connections(), 2, 'a connection whose body ran to its end is not reused');
});

test('an instance that says keep-alive: timeout=1 gets a fresh connection after it', async (t) => {
  const { origin, connections } = await rawServer(t, (socket) => {
    socket.write('HTTP/1.1 200 OK\r\nkeep-alive: timeout=1\r\ncontent-length: 0\r\n\r\n');
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  await send(pool);
  await sleep(5);
  await send(pool);
  assert.equal(connections(), 2, 'the idle connection is dropped a second before the instance would close it');
});

test('failures say how: refused before reaching, protocol errors and a close mid-body after', async (t) => {
  const closed = net.createServer();
  closed.listen(0, '127.0.0.1');
  await once(closed, 'listening');
  const refusedOrigin = `http://127.0.0.1:${(closed.address() as net.AddressInfo).port}`;
  closed.close();
  await assert.rejects(send(new UpstreamPool(refusedOrigin, 60_000)), { code: 'ECONNREFUSED' });

  const { origin } = await rawServer(t, (socket, request) => {
    if (request.includes('/garbage')) socket.write('SMTP ready\r\n\r\n');
    else if (request.includes('/length')) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n');
    else socket.end('HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nonly part');
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  await assert.rejects(send(pool, { ...POST, path: '/garbage' }), { code: 'EPROTO' });
  await assert.rejects(send(pool, { ...POST, path: '/length' }), { code: 'EPROTO', message: /content-length/ });
  let started = false;
  await assert.rejects(send(pool, { ...POST, path: '/cut' }, () => (started = true)), { code: 'ECONNRESET' });
  assert.ok(started, 'the body had started when the connection closed');
});

test('what llhttp refuses is refused: a bare-LF chunk line, content-length with transfer-encoding, a header name with a space', async (t) => {
  const answers: Record<string, string> = {
    '/bare-lf': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n',
    '/both': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
    '/space': 'HTTP/1.1 200 OK\r\nx bad: 1\r\ncontent-length: 0\r\n\r\n',
  };
  const { origin } = await rawServer(t, (socket, request) => {
    socket.write(answers[/^POST (\S+)/.exec(request)![1]]);
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  await assert.rejects(send(pool, { ...POST, path: '/bare-lf' }), { code: 'EPROTO', message: /bare LF/ });
  await assert.rejects(send(pool, { ...POST, path: '/both' }), { code: 'EPROTO', message: /both content-length and transfer-encoding/ });
  await assert.rejects(send(pool, { ...POST, path: '/space' }), { code: 'EPROTO', message: /not a token/ });
});

test('a consumer that asks to pause stops the reads until it resumes; an abort ends the exchange', async (t) => {
  const big = 'x'.repeat(4 * 1024 * 1024);
  const { origin } = await rawServer(t, (socket, request) => {
    socket.write(request.includes('/hang') ? 'HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc' : `HTTP/1.1 200 OK\r\ncontent-length: ${big.length}\r\n\r\n${big}`);
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  let received = 0;
  let paused = false;
  /** What had arrived when the pause ended: read then, not after a fixed sleep that a slow machine outruns. */
  let beforeResume = 0;
  const answer = new Promise<void>((resolve, reject) => {
    const exchange = pool.dispatch(POST, {
      head: () => {},
      data: (chunk) => {
        received += chunk.length;
        if (paused || received < 64 * 1024) return true;
        paused = true;
        setTimeout(() => {
          beforeResume = received;
          exchange.resume();
        }, 100);
        return false;
      },
      end: resolve,
      error: reject,
    });
  });
  await answer;
  assert.ok(paused && beforeResume < big.length, `reads stop while paused (${beforeResume} of ${big.length} bytes)`);
  assert.equal(received, big.length);

  const aborted = new Promise((resolve) => {
    const exchange = pool.dispatch({ ...POST, path: '/hang' }, {
      head: () => {}, data: () => { exchange.abort(new Error('the client left')); return true; }, end: () => resolve('ended'), error: (error) => resolve(error.message),
    });
  });
  assert.equal(await aborted, 'the client left');
});

test('what an exchange holds reaches only that exchange, not the next one on its connection', async (t) => {
  const { origin, connections } = await rawServer(t, (socket, request) => {
    if (request.includes('/first')) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst');
    else void dribble(socket, ['HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsec', 'ond']);
  });
  const pool = new UpstreamPool(origin, 60_000);
  t.after(() => pool.close());
  let first: ReturnType<UpstreamPool['dispatch']> | undefined;
  await new Promise<void>((resolve, reject) => {
    first = pool.dispatch({ ...POST, path: '/first' }, { head: () => {}, data: () => true, end: resolve, error: reject });
  });
  await sleep(5);
  const second = send(pool, { ...POST, path: '/second' });
  first!.abort(new Error('too late'));
  assert.equal((await second).body, 'second');
  assert.equal(connections(), 1);
});
