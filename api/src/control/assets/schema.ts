// Asset contracts (wire-reference 5, "assets"): create, the asset as listed, and the upload URL's reply.
import { z } from 'zod';

export const createAssetSchema = z.object({
  contentType: z.string().max(255).regex(/^[\w.+-]+\/[\w.+-]+(\s*;.*)?$/, 'must be a media type such as image/png'),
  description: z.string().max(1024, 'at most 1024 characters'),
});

export const assetParams = z.object({ assetId: z.guid('must be an asset id (UUID)') });

export const assetSchema = z.object({
  assetId: z.string(),
  description: z.string(),
  contentType: z.string(),
  createdAt: z.string(),
});

export const createAssetResponse = z.object({
  assetId: z.string(),
  /** PUT the bytes here with the same Content-Type; no credential is needed until it expires. */
  uploadUrl: z.string(),
  contentType: z.string(),
  description: z.string(),
});

export const listAssetsResponse = z.object({ assets: z.array(assetSchema) });
export const assetResponse = z.object({ asset: assetSchema });
export const assetRedirectResponse = z.object({ presignedUrl: z.string() });

/** SVC-INPUT-ASSET-REFERENCES on pexec: asset ids, comma-separated. */
export const assetReferencesHeader = z.string()
  .transform((value) => value.split(',').map((id) => id.trim()).filter(Boolean))
  .pipe(z.array(z.guid('each must be an asset id (UUID)')).max(32, 'at most 32 assets per request'));

export type CreateAsset = z.infer<typeof createAssetSchema>;
export type Asset = z.infer<typeof assetSchema>;
