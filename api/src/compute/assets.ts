// Input assets on the agent's side (wire-reference 5): a `stage` message names each asset of a request and
// the signed path on the api host to fetch it from. The files land in <outputDir>/<requestId>/assets/
// <assetId>, which is the request's SVC-ASSET-DIR, before the control plane sends the request. The
// progress watcher's sweep removes request directories an hour after their last change.
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { StageRequest } from './protocol.ts';

/** Fetches a signed path of the control plane into `file`. */
export type AssetFetcher = (signedPath: string, file: string) => Promise<void>;

const SAFE_NAME = /^[0-9a-fA-F-]{36}$/;

export async function stageAssets(outputDir: string | undefined, request: StageRequest, fetch: AssetFetcher): Promise<void> {
  if (!outputDir) throw new Error(`instance ${request.instanceId} is not running here`);
  // Ids come from the control plane; checked again so that no name can leave the directory.
  if (!SAFE_NAME.test(request.requestId) || !request.assets.every((asset) => SAFE_NAME.test(asset.assetId))) {
    throw new Error('an asset or request id is not an id');
  }
  const dir = path.join(outputDir, request.requestId, 'assets');
  await mkdir(dir, { recursive: true, mode: 0o777 });
  await Promise.all(request.assets.map((asset) => fetch(asset.path, path.join(dir, asset.assetId))));
}

export function httpAssetFetcher(options: { server: string; apiHost?: string; ca?: string | Buffer; timeoutMs?: number }): AssetFetcher {
  return (signedPath, file) => new Promise<void>((resolve, reject) => {
    const url = new URL(signedPath, options.server);
    const transport = url.protocol === 'https:' ? https : http;
    const request = transport.get(url, {
      headers: options.apiHost ? { host: options.apiHost } : {}, ca: options.ca,
      servername: options.apiHost?.replace(/:\d+$/, ''), timeout: options.timeoutMs ?? 60_000,
    }, (response) => {
      if (response.statusCode !== 200) {
        response.resume();
        return reject(new Error(`the download of ${path.basename(file)} answered ${response.statusCode}`));
      }
      pipeline(response, createWriteStream(file, { mode: 0o644 })).then(resolve, reject);
    });
    request.on('timeout', () => request.destroy(new Error(`the download of ${path.basename(file)} timed out`)));
    request.on('error', reject);
  });
}
