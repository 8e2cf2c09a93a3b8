// The dispatcher (invocation/dispatcher.ts) with and without the nodes' result keepers: a replica that uses
// them sends a request to the keeper of the instance's node (compute/keeper.ts, real, in front of a real
// HTTP server as the instance), with a token it takes; one that does not, or whose own process runs the
// keeper, sends to the instance itself. A keeper that cannot reach the instance makes the exchange
// `unreachable` (the request waits for another).
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { keeperToken, ResultKeeper } from '../../src/compute/keeper.ts';
import type { ReadyInstance } from '../../src/control/instances/ready.ts';
import { Dispatcher, type ExchangeOutcome, type KeeperTokens } from '../../src/invocation/dispatcher.ts';
import { Invocation, type BodyWriter } from '../../src/invocation/invocation.ts';
import { createLogger } from '../../src/logger.ts';

const KEY = 'node-1-key';
const tokens: KeeperTokens = { token: (nodeId, instanceId, requestId) => keeperToken(nodeId === 'node-1' ? KEY : 'other', instanceId, requestId) };
const target = { ncaId: 'acct', functionId: 'f', versionId: 'v1', functionName: 'fn', inferenceUrl: '/work' };

let instancePort = 0;
let closedPort = 0;
let keeperOrigin = '';
let keeper: ResultKeeper;
let instance: http.Server;
/** Where the keeper finds instance-1: the instance, or a port nothing listens on. */
let keeperSees = 0;
const reached: http.IncomingHttpHeaders[] = [];

before(async () => {
  instance = http.createServer((req, res) => {
    reached.push(req.headers);
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end(`answered ${req.headers['svc-reqid']}`));
  }).listen(0, '127.0.0.1');
  await once(instance, 'listening');
  instancePort = (instance.address() as AddressInfo).port;
  const closed = http.createServer().listen(0, '127.0.0.1');
  await once(closed, 'listening');
  closedPort = (closed.address() as AddressInfo).port;
  closed.close();
  keeperSees = instancePort;
  keeper = new ResultKeeper({
    endpointOf: (id) => (id === 'instance-1' ? { host: '127.0.0.1', ports: { inference: keeperSees, health: 0 } } : undefined),
    log: createLogger('silent'),
  });
  keeperOrigin = await keeper.listen('127.0.0.1', 0);
  keeper.linked(KEY, { orphaned: () => {}, kept: () => true });
});

after(async () => {
  await keeper.close();
  instance.closeAllConnections();
  instance.close();
});

/** instance-1 on node-1 as placement announces it: its own port, and its node's keeper. */
const announced = (ownPort: number): ReadyInstance => ({
  instanceId: 'instance-1', versionId: 'v1', clusterId: 'c1', nodeId: 'node-1', maxRequestConcurrency: 4, gpu: 'L40S', instanceType: 'x', backend: 'b', region: 'r',
  endpoint: { host: '127.0.0.1', ports: { inference: ownPort, health: 0 }, keeper: keeperOrigin },
});

/** Runs `body` while the keeper finds no instance-1 to send to (it could not have carried a request). */
async function keeperBlind<T>(body: () => Promise<T>): Promise<T> {
  keeperSees = closedPort;
  try {
    return await body();
  } finally {
    keeperSees = instancePort;
  }
}

/** One request through `dispatcher`: how it ended and the body it got. */
function send(dispatcher: Dispatcher, ready: ReadyInstance, id: string): Promise<{ outcome: ExchangeOutcome; status?: number; body: string }> {
  const invocation = new Invocation(id, target, 'owner', { headers: {}, body: Buffer.from('{}'), sse: false });
  return new Promise((resolve) => {
    let status: number | undefined;
    let body = '';
    const writer: BodyWriter = { data: (chunk) => { body += chunk; return true; }, end: () => {}, error: () => {}, onDrain: () => {} };
    dispatcher.send(invocation, ready, {
      started: (answered) => {
        status = answered;
        return writer;
      },
      finished: (outcome) => resolve({ outcome, status, body }),
    });
  });
}

test('with keepers, a request goes through its node\'s keeper (the instance\'s own port is not used) and reaches the instance without the keeper\'s headers', async () => {
  const dispatcher = new Dispatcher({ maxResultBytes: 1024, keeper: tokens });
  try {
    const answer = await send(dispatcher, announced(closedPort), 'r-keeper');
    assert.deepEqual(answer, { outcome: 'done', status: 200, body: 'answered r-keeper' });
    const headers = reached.at(-1)!;
    assert.equal(headers['svc-reqid'], 'r-keeper');
    assert.equal(headers['svc-keeper-token'], undefined);
    assert.equal(headers['svc-keeper-instance'], undefined);
  } finally {
    dispatcher.close();
  }
});

test('without keepers (SVC_RESULT_KEEPERS=false, or one process), a request goes straight to the instance', async () => {
  const dispatcher = new Dispatcher({ maxResultBytes: 1024 });
  try {
    assert.deepEqual(await keeperBlind(() => send(dispatcher, announced(instancePort), 'r-direct')), { outcome: 'done', status: 200, body: 'answered r-direct' });
  } finally {
    dispatcher.close();
  }
});

test('a keeper that cannot reach the instance: the exchange is unreachable, so the request may wait for another instance', async () => {
  const dispatcher = new Dispatcher({ maxResultBytes: 1024, keeper: tokens });
  try {
    const answer = await keeperBlind(() => send(dispatcher, announced(instancePort), 'r-unreachable'));
    assert.equal(answer.outcome, 'unreachable');
    assert.equal(answer.status, undefined, 'nothing started for the client');
  } finally {
    dispatcher.close();
  }
});

test('the keeper of this process\'s own agent is skipped: its instances die with this process, so there is no answer to keep', async () => {
  const dispatcher = new Dispatcher({ maxResultBytes: 1024, keeper: tokens });
  dispatcher.keeperInProcess(keeperOrigin);
  try {
    assert.deepEqual(await keeperBlind(() => send(dispatcher, announced(instancePort), 'r-own')), { outcome: 'done', status: 200, body: 'answered r-own' });
  } finally {
    dispatcher.close();
  }
});
