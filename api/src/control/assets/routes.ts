// Asset endpoints (wire-reference 5): the account's ones need invoke_function, as the reference's; the
// content path is reached only with the signed URL the platform handed out (no credential).
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { signedQuery } from '../../domain/signed-paths.ts';
import { absoluteUrl } from '../../http/host.ts';
import type { AssetsService } from './service.ts';
import { assetParams, assetRedirectResponse, assetResponse, createAssetResponse, createAssetSchema, listAssetsResponse } from './schema.ts';

const tag = 'Assets';
const invoke = access.functions('invoke_function');

export function assetRoutes(assets: AssetsService) {
  return [
    route({
      method: 'POST', path: '/v2/svc/assets', summary: 'Create an asset: its id and a signed URL to PUT its bytes to', tag, access: invoke,
      body: createAssetSchema,
      responses: { 200: { description: 'The asset id and upload URL', schema: createAssetResponse } },
      handle: async ({ principal, body, req }) => {
        const { uploadPath, ...created } = await assets.create(principal, body);
        return { body: { ...created, uploadUrl: absoluteUrl(req, uploadPath) } };
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/assets', summary: "The account's uploaded assets", tag, access: invoke,
      responses: { 200: { description: 'Assets', schema: listAssetsResponse } },
      handle: async ({ principal }) => ({ body: { assets: await assets.list(principal) } }),
    }),
    route({
      method: 'GET', path: '/v2/svc/assets/{assetId}', summary: 'One asset', tag, access: invoke, params: assetParams,
      responses: { 200: { description: 'The asset', schema: assetResponse } },
      handle: async ({ principal, params }) => ({ body: { asset: await assets.get(principal, params.assetId) } }),
    }),
    route({
      method: 'DELETE', path: '/v2/svc/assets/{assetId}', summary: 'Delete an asset and its bytes', tag, access: invoke, params: assetParams,
      responses: { 204: { description: 'Deleted' } },
      handle: async ({ principal, params }) => {
        await assets.delete(principal, params.assetId);
        return { status: 204 };
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/assets/{assetId}/content-redirect', summary: 'A signed URL to download the asset', tag, access: invoke,
      params: assetParams,
      responses: { 200: { description: 'The download URL', schema: assetRedirectResponse } },
      handle: async ({ principal, params, req }) => ({
        body: { presignedUrl: absoluteUrl(req, await assets.downloadPath(principal, params.assetId)) },
      }),
    }),
    route({
      method: 'PUT', path: '/v2/svc/assets/{assetId}/content', summary: "Upload an asset's bytes (the signed upload URL; Content-Type as created)", tag,
      access: access.public, params: assetParams, query: signedQuery,
      responses: { 200: { description: 'Stored' } },
      handle: async ({ params, query, req }) => {
        const declared = req.headers['content-length'];
        await assets.upload(params.assetId, query, req.headers['content-type'], req, declared === undefined ? undefined : Number(declared));
        return { status: 200 };
      },
    }),
    route({
      method: 'GET', path: '/v2/svc/assets/{assetId}/content', summary: "Download an asset's bytes (a signed download URL)", tag,
      access: access.public, params: assetParams, query: signedQuery,
      responses: { 200: { description: 'The bytes as uploaded', contentType: 'application/octet-stream', schema: z.unknown() } },
      handle: async ({ params, query }, res) => {
        const blob = await assets.download(params.assetId, query);
        // writeHead, not Express's set: the type goes out exactly as uploaded (no charset added).
        res.writeHead(200, { 'content-type': blob.contentType, 'content-length': String(blob.size) });
        await pipeline(blob.body, res);
        return undefined;
      },
    }),
  ];
}
