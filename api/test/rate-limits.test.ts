// Rate limits (wire-reference 2 `rateLimit`, 5 "429 rate limit") in one process: a version's windows per
// calling account (`rateLimit`, `perNcaIdRate`, `exemptedNcaIds`) and per user (`perUserRate`), a 429
// problem with Retry-After when one is full, and a changed limit applied without a restart. The platform's
// clock is moved between windows, so no test waits for one to end.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { parseArgs } from 'node:util';
import { functionCommands } from '../src/cli/commands/functions.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor, type Deployed } from './helpers/functions.ts';
import { startTestPlatform, type TestPlatform } from './helpers/platform.ts';
import { until } from './helpers/wait.ts';

const ACCOUNT = 'svc-default';
const echo = (extra: Record<string, unknown> = {}) => echoBody({
  name: undefined, health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 }, ...extra,
});

describe('rate limits in one process', () => {
  let svc: TestPlatform;
  let token: string;
  let key: string;
  let fn: Deployed;

  const pexec = (bearer = key) => svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer, body: { hello: 'rate' } });
  const burst = async (count: number, bearer = key) => {
    const answers = await Promise.all(Array.from({ length: count }, () => pexec(bearer)));
    return { answers, passed: answers.filter((answer) => answer.status === 200).length, refused: answers.filter((answer) => answer.status === 429) };
  };
  const setLimit = async (rateLimit: Record<string, unknown>) => {
    const response = await svc.api('PUT', `/v2/svc/functions/${fn.id}/versions/${fn.versionId}`, { bearer: token, body: { rateLimit } });
    assert.equal(response.status, 200, response.text);
    // The next window starts clean: the clock moves past every window of the rates used here.
    svc.advance(61_000);
  };
  /** A key of another user of the same account (perUserRate counts per credential owner). */
  const keyOf = async (owner: string) => {
    const response = await svc.keys('POST', '/v1/keys', {
      bearer: token, headers: { 'key-issuer-service': 'svc-api', 'key-issuer-id': 'svc-api', 'key-owner-id': owner },
      body: {
        expires_at: new Date(Date.now() + 86_400_000).toISOString(),
        authorizations: { policies: [{ product: 'svc-cloud-functions', scopes: ['invoke_function'] }] },
      },
    });
    assert.equal(response.status, 200, response.text);
    return response.body.value as string;
  };

  before(async () => {
    svc = await startTestPlatform();
    token = await svc.token();
    key = await svc.apiKey(token, ['invoke_function', 'list_functions']);
    fn = await deploy(svc, token, echo({ rateLimit: { rateLimit: '5-S' } }), { maxRequestConcurrency: 32 });
    await waitFor(svc, key, fn, running);
  });
  after(() => svc?.close());

  test('5-S lets 5 of 20 through, the rest get 429 problem+json with Retry-After; the next second lets 5 more', async () => {
    const first = await burst(20);
    assert.equal(first.passed, 5, `statuses ${first.answers.map((answer) => answer.status)}`);
    assert.equal(first.refused.length, 15);
    for (const refused of first.refused) {
      assert.match(String(refused.headers['content-type']), /^application\/problem\+json/);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal(refused.body.status, 429);
      assert.match(refused.body.detail, /Rate limit 5-S of function version .* reached for account 'svc-default'/);
    }
    svc.advance(1000);
    const second = await burst(8);
    assert.equal(second.passed, 5, `statuses ${second.answers.map((answer) => answer.status)}`);
    assert.equal(second.refused.length, 3);
  });

  test('a minute rate says how long to wait; several rates each hold', async () => {
    await setLimit({ rateLimit: '100-S,3-M' });
    const refused = await until('the new limit to apply', async () => {
      const answer = await pexec();
      return answer.status === 429 && /3-M/.test(answer.body.detail) && answer;
    });
    const seconds = Number(refused.headers['retry-after']);
    assert.ok(seconds > 1 && seconds <= 60, `Retry-After ${seconds}`);
  });

  test('perNcaIdRate replaces rateLimit for the account it names; exemptedNcaIds are not limited', async () => {
    await setLimit({ rateLimit: '5-M', perNcaIdRate: { [ACCOUNT]: '2-M' } });
    await until('the per-account rate to apply', async () => {
      svc.advance(61_000);
      return (await burst(4)).passed === 2;
    });
    await setLimit({ rateLimit: '2-M', exemptedNcaIds: [ACCOUNT] });
    await until('the exemption to apply', async () => (await burst(10)).passed === 10);
    // perNcaIdRate wins over the exemption for the account it names.
    await setLimit({ rateLimit: '2-M', exemptedNcaIds: [ACCOUNT], perNcaIdRate: { [ACCOUNT]: '3-M' } });
    await until('the per-account rate to apply over the exemption', async () => {
      svc.advance(61_000);
      return (await burst(6)).passed === 3;
    });
  });

  test('perUserRate counts per user within the account', async () => {
    const [alice, bob] = [await keyOf('alice'), await keyOf('bob')];
    await setLimit({ rateLimit: '100-M', perUserRate: '2-M' });
    await until('the per-user rate to apply', async () => {
      svc.advance(61_000);
      return (await burst(3, alice)).passed === 2;
    });
    const bobs = await burst(3, bob);
    assert.equal(bobs.passed, 2, 'another user has windows of their own');
    const refused = await pexec(alice);
    assert.equal(refused.status, 429);
    assert.match(refused.body.detail, /for this user \(perUserRate\)/);
  });

  test('`svc function update F V --rate-limit 2-M` sets it; a bad rate is refused naming the field', async () => {
    const update = async (args: string[]) => {
      const command = functionCommands['function update'];
      const parsed = parseArgs({ args, options: { ...command.options }, allowPositionals: true, strict: true });
      const printed: string[] = [];
      await command.run({
        values: parsed.values, positionals: parsed.positionals, env: {}, state: { server: svc.url, gatewayAddress: 'localhost', token },
        print: (human) => printed.push(human),
      });
      return printed.join('\n');
    };
    const printed = await update([fn.id, fn.versionId, '--rate-limit', '2-M']);
    assert.match(printed, /rateLimit\s+\{"rateLimit":"2-M"\}/);
    svc.advance(61_000);
    await until('the CLI\'s limit to apply', async () => {
      svc.advance(61_000);
      return (await burst(4)).passed === 2;
    });
    await assert.rejects(update([fn.id, fn.versionId, '--rate-limit', 'fast']), /rateLimit\.rateLimit: must look like 10-S/);
  });

  test('without a rate limit nothing is refused', async () => {
    const unlimited = await deploy(svc, token, echo(), { maxRequestConcurrency: 32 });
    await waitFor(svc, key, unlimited, running);
    const answers = await Promise.all(Array.from({ length: 30 }, () => svc.api('POST', `/v2/svc/pexec/functions/${unlimited.id}`, { bearer: key, body: {} })));
    assert.deepEqual([...new Set(answers.map((answer) => answer.status))], [200]);
  });
});
