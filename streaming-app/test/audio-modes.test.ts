// The two Opus modes of AudioCapture, with a real PulseAudio server and a tone played into its sink: 5 ms
// CELT-only frames on a clean link, 20 ms hybrid frames (the mode that carries in-band FEC) on a lossy one.
// The mode is read from each packet's TOC byte (RFC 6716 §3.1): configurations 0-15 are SILK or hybrid,
// 16-31 CELT-only; the frame length follows from the configuration.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { AudioCapture, PulseServer, type AudioMode, type EncodedAudio } from '../src/audio.ts';
import { createLogger } from '../src/logger.ts';
import { FFMPEG, missingTools, PULSEAUDIO } from './helpers.ts';

/** Frame length in ms of a TOC configuration (RFC 6716 table 2). */
function frameMs(config: number): number {
  if (config < 12) return [10, 20, 40, 60][config % 4];
  if (config < 16) return [10, 20][config % 2];
  return [2.5, 5, 10, 20][config % 4];
}

describe('Opus modes', { skip: missingTools([FFMPEG, PULSEAUDIO]) }, () => {
  let server: PulseServer;
  before(async () => {
    server = await PulseServer.start('pulseaudio');
  });
  after(() => server?.stop());

  async function packetsIn(mode: AudioMode, count: number): Promise<EncodedAudio[]> {
    const tone = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000', '-f', 'pulse', 'tone'],
      { env: { ...process.env, ...server.appEnv }, stdio: 'ignore' });
    const packets: EncodedAudio[] = [];
    let failure: string | undefined;
    const capture = new AudioCapture(server, 'ffmpeg', createLogger('silent'), (packet) => packets.push(packet), (reason) => { failure = reason; }, mode);
    try {
      const deadline = Date.now() + 20_000;
      while (packets.length < count) {
        assert.equal(failure, undefined);
        assert.ok(Date.now() < deadline, `${packets.length} of ${count} packets`);
        await new Promise((r) => setTimeout(r, 50));
      }
      return packets;
    } finally {
      capture.stop();
      tone.kill();
    }
  }

  test('low-delay: 5 ms CELT-only frames', async () => {
    const packets = await packetsIn('low-delay', 50);
    const configs = packets.slice(10).map((p) => p.data[0] >> 3);
    assert.ok(configs.every((c) => c >= 16 && frameMs(c) === 5), `TOC configurations ${[...new Set(configs)]}`);
    assert.ok(packets.every((p) => p.durationMs === 5));
  });

  test('resilient: 20 ms SILK/hybrid frames, the mode in-band FEC needs', async () => {
    const packets = await packetsIn('resilient', 30);
    const configs = packets.slice(5).map((p) => p.data[0] >> 3);
    assert.ok(configs.every((c) => c < 16 && frameMs(c) === 20), `TOC configurations ${[...new Set(configs)]}`);
    assert.ok(packets.every((p) => p.durationMs === 20));
  });
});
