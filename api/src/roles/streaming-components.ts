// What the streaming demo of `svc serve --samples` has to work with on this machine, for the banner: the
// encoder the streaming sample will run (found the way the sample finds it, streaming-app/src/
// ffmpeg-binary.ts: the system's ffmpeg, else the npm-shipped one), the STUN/TURN server, and a display
// for applications that draw on X. Each line says what a missing piece costs and how to get it.
import { createRequire } from 'node:module';
import { demoSource, onPath } from '../control/samples.ts';
import type { TurnService } from '../turn/server.ts';

export interface StreamingComponents {
  /** False when the sample cannot encode: the demo is not offered. */
  canStream: boolean;
  lines: string[];
}

function encoder(): { ok: boolean; line: string } {
  const system = onPath('ffmpeg');
  if (system) return { ok: true, line: `system ffmpeg (${system})` };
  try {
    const shipped = createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string; version: string };
    return { ok: true, line: `ffmpeg from npm (@ffmpeg-installer, ${shipped.version}: libx264/libvpx, no NVENC; install Debian's ffmpeg for more)` };
  } catch {
    return { ok: false, line: 'none: install ffmpeg (Debian package ffmpeg), or npm install without --omit=optional' };
  }
}

const turnLines: Record<TurnService['kind'], string> = {
  coturn: 'TURN relay (coturn)',
  'node-turn': 'STUN only (node-turn): browsers behind strict NATs cannot connect; install coturn for a relay',
  external: 'TURN relay (external server)',
  none: 'none: browsers must reach instances directly',
};

export function streamingComponents(turn: TurnService['kind']): StreamingComponents {
  const found = encoder();
  return {
    canStream: found.ok,
    lines: [
      `    encoder   ${found.line}`,
      `    relay     ${turnLines[turn]}`,
      `    display   ${demoSource().why}`,
    ],
  };
}
