// The platform on a NATS server that wants credentials, as an installation runs it (docs/scale-out.md):
// a client without them, or with wrong ones, is refused, while the platform with the settings
// (invocation.nats*) runs requests through it; each kind of credential works; over TLS the server's
// certificate is verified unless the development flag says otherwise, and the server verifies the
// platform's. A file the settings name that cannot be used stops start-up with one line naming it.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { connectNats, type NatsServer } from '../src/invocation/nats.ts';
import { tempDir } from './helpers/databases.ts';
import { echoBody } from './helpers/fixtures.ts';
import { deploy, running, waitFor } from './helpers/functions.ts';
import { natsServerAvailable, startNats, type TestNats } from './helpers/nats.ts';
import { MANAGEMENT_SCOPES, startTestPlatform } from './helpers/platform.ts';

/** A fresh platform (the embedded store) queueing on `nats`: it deploys the echo and answers one pexec. */
async function platformAnswers(nats: NatsServer) {
  const svc = await startTestPlatform({ config: { invocation: nats } });
  try {
    const token = await svc.token({ scopes: [...MANAGEMENT_SCOPES, 'invoke_function'] });
    const fn = await deploy(svc, token, echoBody({ health: { protocol: 'HTTP', uri: '/health', port: 8000, timeout: 'PT2S', expectedStatusCode: 200 } }));
    await waitFor(svc, token, fn, running);
    const response = await svc.api('POST', `/v2/svc/pexec/functions/${fn.id}`, { bearer: token, body: { through: 'NATS' } });
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(response.body.echo, { through: 'NATS' });
    assert.ok(svc.logs.some((line) => line.includes('invocation queue on NATS JetStream')), 'the queue is the shared one');
  } finally {
    await svc.close();
  }
}

/** The one line a connection attempt fails with. */
async function refusal(attempt: Promise<unknown>): Promise<string> {
  try {
    await attempt;
  } catch (error) {
    const message = (error as Error).message;
    assert.equal(message.split('\n').length, 1, message);
    return message;
  }
  assert.fail('the connection was accepted');
}

describe('NATS with credentials', { skip: !natsServerAvailable() }, () => {
  const servers: TestNats[] = [];
  after(async () => {
    await Promise.all(servers.map((server) => server.stop()));
  });
  const start = async (options: Parameters<typeof startNats>[0]) => {
    const server = await startNats(options);
    servers.push(server);
    return server;
  };

  test('a client without credentials or with a wrong password is refused; the platform with them runs a request', async () => {
    const nats = await start({ auth: 'password' });
    assert.match(await refusal(nats.connect({ natsUser: undefined, natsPassword: undefined })), /^cannot reach NATS at nats:\/\/127\.0\.0\.1:\d+: .*authorization/i);
    const wrong = await refusal(startTestPlatform({ config: { invocation: { ...nats.settings, natsPassword: 'not-the-password' } } }));
    assert.match(wrong, /authorization/i);
    assert.ok(!wrong.includes('not-the-password') && !wrong.includes(nats.settings.natsPassword!), 'the line carries no password');
    await platformAnswers(nats.settings);
  });

  for (const [auth, kind] of [['token', 'a token'], ['nkey', 'an nkey seed file'], ['creds', 'a .creds file (operator mode)']] as const) {
    test(`${kind}: refused without it, the platform runs with it`, async () => {
      const nats = await start({ auth });
      assert.match(await refusal(nats.connect({ natsToken: undefined, natsNkeySeedFile: undefined, natsCredsFile: undefined })), /authorization/i);
      await platformAnswers(nats.settings);
    });
  }

  test('a file the settings name that cannot be used: one line naming the setting', async () => {
    const nats = await start({ auth: 'nkey' });
    const notASeed = path.join(tempDir(), 'seed');
    writeFileSync(notASeed, 'SUANOTASEED\n', { mode: 0o600 });
    assert.equal(await refusal(connectNats({ ...nats.settings, natsNkeySeedFile: notASeed })),
      `invocation.natsNkeySeedFile (SVC_NATS_NKEY_SEED_FILE): ${notASeed} holds no nkey seed`);
    assert.equal(await refusal(connectNats({ ...nats.settings, natsNkeySeedFile: '/nonexistent/seed' })),
      'invocation.natsNkeySeedFile (SVC_NATS_NKEY_SEED_FILE): cannot read /nonexistent/seed (ENOENT)');
  });

  test('TLS: the server\'s certificate is verified (unless natsTlsInsecure), the server verifies the platform\'s; the platform runs a request', async () => {
    const nats = await start({ tls: true });
    assert.match(nats.settings.natsUrl, /^tls:\/\//);
    assert.match(await refusal(nats.connect({ natsTlsCaFile: undefined })), /certificate/i, 'a server certificate no trusted CA signed');
    assert.match(await refusal(nats.connect({ natsTlsCertFile: undefined, natsTlsKeyFile: undefined })), /^cannot reach NATS/, 'no client certificate');
    const insecure = await nats.connect({ natsTlsCaFile: undefined, natsTlsInsecure: true });
    await insecure.close();
    await platformAnswers(nats.settings);
  });
});
