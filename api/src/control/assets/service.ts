// Input assets (wire-reference 5): an account creates an asset, PUTs its bytes to the signed upload URL it
// got, and names it in SVC-INPUT-ASSET-REFERENCES on pexec; the function finds it in SVC-ASSET-DIR. The
// bytes live in the blob store under assets/<ncaId>/<assetId>. An asset exists for the API once uploaded,
// as the reference's (an object in its bucket); a pending one is forgotten when its upload URL expires.
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Principal } from '../../domain/principal.ts';
import { badRequest, notFound, Problem } from '../../domain/problem.ts';
import type { PathSigner, SignedQuery } from '../../domain/signed-paths.ts';
import type { BlobStore } from '../../store/blobs.ts';
import type { AccountsService } from '../accounts/service.ts';
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
  /** The account's quota: how many assets (maxAssetsAllowed) and how many bytes of them (maxAssetBytesAllowed). */
  accounts: Pick<AccountsService, 'checkQuota' | 'requireAccount'>;
  now?: () => Date;
}

/** The signed content path of an asset: PUT uploads it, GET downloads it. */
export const assetContentPath = (assetId: string) => `/v2/svc/assets/${assetId}/content`;
const blobKey = (row: AssetRow) => `assets/${row.nca_id}/${row.asset_id}`;

/** An upload refused for its size; the connection closes, as the client may still be sending. */
const tooLarge = (detail: string) => new Problem('payload-too-large', detail, { headers: { connection: 'close' } });

function toAsset(row: AssetRow): Asset {
  return { assetId: row.asset_id, description: row.description, contentType: row.content_type, createdAt: row.created_at };
}

export function createAssetsService(options: AssetsServiceOptions) {
  const { repo, blobs, signer, settings, accounts } = options;
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

  /** How many bytes an upload to `row` may bring, and the refusal naming the limit it would pass. */
  async function roomFor(row: AssetRow) {
    const limit = (await accounts.requireAccount(row.nca_id)).max_asset_bytes;
    // A second upload to the same asset replaces its bytes.
    const left = Math.max(0, limit - (await repo.storedBytes(row.nca_id) - (row.size ?? 0)));
    const overAccount = tooLarge(`The account's assets may hold ${limit} bytes together (maxAssetBytesAllowed); ${left} are left`);
    const overAsset = tooLarge(`An asset may hold at most ${settings.maxBytes} bytes (assets.maxBytes)`);
    return { limit, overAccount, bytes: Math.min(left, settings.maxBytes), refusal: left < settings.maxBytes ? overAccount : overAsset };
  }

  return {
    async create(principal: Principal, body: CreateAsset) {
      await accounts.checkQuota(principal.ncaId, 'assets', await repo.count(principal.ncaId));
      const row: AssetRow = {
        asset_id: randomUUID(), nca_id: principal.ncaId, content_type: body.contentType, description: body.description,
        size: null, uploaded_at: null, created_at: now().toISOString(),
      };
      await repo.insert(row);
      return { assetId: row.asset_id, uploadPath: signer.sign('PUT', assetContentPath(row.asset_id), settings.urlSeconds), contentType: row.content_type, description: row.description };
    },

    /**
     * The bytes of a signed upload; the Content-Type must be the one the asset was created with. A declared
     * length over what the asset or the account's quota may take is refused before a byte is read.
     */
    async upload(assetId: string, query: SignedQuery, contentType: string | undefined, body: Readable, declaredBytes?: number): Promise<void> {
      const row = await signed('PUT', assetId, query);
      if (contentType !== row.content_type) {
        throw badRequest(`Content-Type must be '${row.content_type}', the type the asset was created with`);
      }
      const room = await roomFor(row);
      if (declaredBytes !== undefined && declaredBytes > room.bytes) throw room.refusal;
      const stored = await blobs.put(blobKey(row), body, room.bytes).catch((error: unknown) => {
        throw error instanceof Problem && error.code === 'payload-too-large' ? room.refusal : error;
      });
      await repo.markUploaded(assetId, stored.size, now().toISOString());
      // Uploads running at once each saw room for themselves; counted after marking, the last one sees them all.
      if (await repo.storedBytes(row.nca_id) > room.limit) {
        await repo.markPending(assetId);
        await blobs.deletePrefix(blobKey(row));
        throw room.overAccount;
      }
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
