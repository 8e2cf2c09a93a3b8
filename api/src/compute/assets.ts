// Input assets on the agent's side (wire-reference 5): a `stage` message names each asset of a request and
// the signed path on the api host to fetch it from. The files land in <outputDir>/<requestId>/assets/
// <assetId>, which is the request's SVC-ASSET-DIR, before the control plane sends the request. The
// progress watcher's sweep removes request directories an hour after their last change. The output
// directory is the instance's to write, so the directories and files are made through safe-fs.ts: never
// through a link, and each file new.
import type { Writable } from 'node:stream';
import http from 'node:http';
import https from 'node:https';
import { pipeline } from 'node:stream/promises';
import type { StageRequest } from './protocol.ts';
import { createFileIn, openDirBeneath } from './safe-fs.ts';

/** Fetches a signed path of the control plane into `into` (`name` says which, in errors). */
export type AssetFetcher = (signedPath: string, into: Writable, name: string) => Promise<void>;

const SAFE_NAME = /^[0-9a-fA-F-]{36}$/;

export async function stageAssets(outputDir: string | undefined, request: StageRequest, fetch: AssetFetcher): Promise<void> {
  if (!outputDir) throw new Error(`instance ${request.instanceId} is not running here`);
  // Ids come from the control plane; checked again so that no name can leave the directory.
  if (!SAFE_NAME.test(request.requestId) || !request.assets.every((asset) => SAFE_NAME.test(asset.assetId))) {
    throw new Error('an asset or request id is not an id');
  }
  const dir = await openDirBeneath(outputDir, [request.requestId, 'assets'], true);
  try {
    await Promise.all(request.assets.map(async (asset) => {
      const file = await createFileIn(dir, asset.assetId);
      await fetch(asset.path, file.createWriteStream(), asset.assetId);
    }));
  } finally {
    await dir.close();
  }
}

export function httpAssetFetcher(options: { server: string; apiHost?: string; ca?: string | Buffer; timeoutMs?: number }): AssetFetcher {
  return (signedPath, into, name) => new Promise<void>((resolve, reject) => {
    const url = new URL(signedPath, options.server);
    const transport = url.protocol === 'https:' ? https : http;
    const request = transport.get(url, {
      headers: options.apiHost ? { host: options.apiHost } : {}, ca: options.ca,
      servername: options.apiHost?.replace(/:\d+$/, ''), timeout: options.timeoutMs ?? 60_000,
    }, (response) => {
      if (response.statusCode !== 200) {
        response.resume();
        into.destroy();
        return reject(new Error(`the download of ${name} answered ${response.statusCode}`));
      }
      pipeline(response, into).then(resolve, reject);
    });
    request.on('timeout', () => request.destroy(new Error(`the download of ${name} timed out`)));
    request.on('error', (error) => {
      into.destroy();
      reject(error);
    });
  });
}
