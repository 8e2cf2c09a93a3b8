// Input assets (wire-reference 5): an account creates an asset, PUTs its bytes to the signed upload URL it
// got, and names it in SVC-INPUT-ASSET-REFERENCES on pexec; the function finds it in SVC-ASSET-DIR. The
// bytes live in the blob store under assets/<ncaId>/<assetId>. An asset exists for the API once uploaded,
// as the reference's (an object in its bucket); a pending one is forgotten when its upload URL expires.
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Principal } from '../../domain/principal.ts';
import { badRequest, notFound } from '../../domain/problem.ts';
import type { PathSigner, SignedQuery } from '../../domain/signed-paths.ts';
import type { BlobStore } from '../../store/blobs.ts';
import type { AssetRow, AssetsRepo } from './repo.ts';
import type { Asset, CreateAsset } from './schema.ts';

export interface AssetSettings {
  /** The largest asset accepted. */
  maxBytes: number;
  /** How long an upload or download URL works. */
  urlSeconds: number;
}

export interface AssetsServiceOptions {
  repo: AssetsRepo;
  blobs: BlobStore;
  signer: PathSigner;
  settings: AssetSettings;
  now?: () => Date;
}

/** The signed content path of an asset: PUT uploads it, GET downloads it. */
export const assetContentPath = (assetId: string) => `/v2/svc/assets/${assetId}/content`;
const blobKey = (row: AssetRow) => `assets/${row.nca_id}/${row.asset_id}`;

function toAsset(row: AssetRow): Asset {
  return { assetId: row.asset_id, description: row.description, contentType: row.content_type, createdAt: row.created_at };
}

export function createAssetsService(options: AssetsServiceOptions) {
  const { repo, blobs, signer, settings } = options;
  const now = options.now ?? (() => new Date());
  const unknown = (assetId: string) => notFound(`Asset '${assetId}' does not exist for this account`);
  let sweeper: NodeJS.Timeout | undefined;

  async function uploaded(principal: Principal, assetId: string): Promise<AssetRow> {
    const row = await repo.find(assetId);
    if (!row || row.nca_id !== principal.ncaId || !row.uploaded_at) throw unknown(assetId);
    return row;
  }

  /** The row a signed content path names (the signature is checked first: the id alone grants nothing). */
  async function signed(method: 'GET' | 'PUT', assetId: string, query: SignedQuery): Promise<AssetRow> {
    signer.check(method, assetContentPath(assetId), query);
    const row = await repo.find(assetId);
    if (!row || (method === 'GET' && !row.uploaded_at)) throw notFound(`Asset '${assetId}' does not exist`);
    return row;
  }

  return {
    async create(principal: Principal, body: CreateAsset) {
      const row: AssetRow = {
        asset_id: randomUUID(), nca_id: principal.ncaId, content_type: body.contentType, description: body.description,
        size: null, uploaded_at: null, created_at: now().toISOString(),
      };
      await repo.insert(row);
      return { assetId: row.asset_id, uploadPath: signer.sign('PUT', assetContentPath(row.asset_id), settings.urlSeconds), contentType: row.content_type, description: row.description };
    },

    /** The bytes of a signed upload; the Content-Type must be the one the asset was created with. */
    async upload(assetId: string, query: SignedQuery, contentType: string | undefined, body: Readable): Promise<void> {
      const row = await signed('PUT', assetId, query);
      if (contentType !== row.content_type) {
        throw badRequest(`Content-Type must be '${row.content_type}', the type the asset was created with`);
      }
      const stored = await blobs.put(blobKey(row), body, settings.maxBytes);
      await repo.markUploaded(assetId, stored.size, now().toISOString());
    },

    async download(assetId: string, query: SignedQuery) {
      const row = await signed('GET', assetId, query);
      const blob = await blobs.get(blobKey(row));
      if (!blob) throw notFound(`Asset '${assetId}' has no content`);
      return { ...blob, contentType: row.content_type };
    },

    async list(principal: Principal): Promise<Asset[]> {
      return (await repo.listUploaded(principal.ncaId)).map(toAsset);
    },

    async get(principal: Principal, assetId: string): Promise<Asset> {
      return toAsset(await uploaded(principal, assetId));
    },

    async delete(principal: Principal, assetId: string): Promise<void> {
      const row = await uploaded(principal, assetId);
      await repo.delete(assetId);
      await blobs.deletePrefix(blobKey(row));
    },

    /** A signed download path (the reference's content-redirect). */
    async downloadPath(principal: Principal, assetId: string): Promise<string> {
      const row = await uploaded(principal, assetId);
      return signer.sign('GET', assetContentPath(row.asset_id), settings.urlSeconds);
    },

    /** Checks that the account has every asset a request names: a 404 for the first it lacks. */
    async check(ncaId: string, assetIds: string[]): Promise<void> {
      if (assetIds.length === 0) return;
      const found = new Set((await repo.findUploaded(ncaId, assetIds)).map((row) => row.asset_id));
      const missing = assetIds.find((id) => !found.has(id));
      if (missing) throw notFound(`Asset '${missing}' does not exist for this account`);
    },

    /** Where an agent downloads each asset of a request from (signed, no credential). */
    stagingPaths(assetIds: string[]) {
      return assetIds.map((assetId) => ({ assetId, path: signer.sign('GET', assetContentPath(assetId), settings.urlSeconds) }));
    },

    /** Forgets pending assets whose upload URL has expired. */
    async sweep(): Promise<void> {
      const cutoff = new Date(now().getTime() - settings.urlSeconds * 1000).toISOString();
      for (const row of await repo.listPendingBefore(cutoff)) {
        await repo.delete(row.asset_id);
        await blobs.deletePrefix(blobKey(row));
      }
    },

    /** Sweeps every `intervalMs` until stop(); a failed sweep is logged and tried again next time. */
    start(intervalMs: number, failed: (error: unknown) => void) {
      sweeper = setInterval(() => void this.sweep().catch(failed), intervalMs);
      sweeper.unref();
    },

    stop() {
      clearInterval(sweeper);
    },
  };
}

export type AssetsService = ReturnType<typeof createAssetsService>;
