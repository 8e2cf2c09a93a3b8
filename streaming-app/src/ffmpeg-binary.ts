// The ffmpeg the app runs when FFMPEG_PATH is not set: the system's first (a distribution build may have
// NVENC), else the one shipped in the optional npm package @ffmpeg-installer/ffmpeg (a 2018 static build
// with libx264 and libvpx), so `npm install` alone is enough to stream; else plain "ffmpeg", whose absence
// the encoder probe reports.
import { createRequire } from 'node:module';
import { which } from './which.ts';

export function defaultFfmpeg(): string {
  if (which('ffmpeg')) return 'ffmpeg';
  try {
    return (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
  } catch {
    return 'ffmpeg';
  }
}
