// The ffmpeg the app runs when FFMPEG_PATH is not set: the system's first (a distribution build may have
// NVENC), else the one shipped in the optional npm package @ffmpeg-installer/ffmpeg (a 2018 static build
// with libx264 and libvpx), so `npm install` alone is enough to stream; else plain "ffmpeg", whose absence
// the encoder probe reports.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, join } from 'node:path';

export function defaultFfmpeg(): string {
  if ((process.env.PATH ?? '').split(delimiter).some((dir) => dir && existsSync(join(dir, 'ffmpeg')))) return 'ffmpeg';
  try {
    return (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
  } catch {
    return 'ffmpeg';
  }
}
