// Account contracts (spec 2.3, 4.2): one schema each for what comes in and what goes out.
import { z } from 'zod';

export const ncaIdSchema = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$/, 'must be 1-64 letters, digits, - or _');

export const limitBounds = {
  maxFunctionsAllowed: 2147483647,
  maxTasksAllowed: 2147483647,
  maxTelemetriesAllowed: 50,
  maxRegistryCredentialsAllowed: 50,
  maxInstancesAllowed: 2147483647,
  maxAssetsAllowed: 2147483647,
  maxAssetBytesAllowed: Number.MAX_SAFE_INTEGER,
} as const;

const bounded = (max: number) => z.number().int().min(0).max(max);

export const accountLimitsSchema = z.object({
  maxFunctionsAllowed: bounded(limitBounds.maxFunctionsAllowed).optional(),
  maxTasksAllowed: bounded(limitBounds.maxTasksAllowed).optional(),
  maxTelemetriesAllowed: bounded(limitBounds.maxTelemetriesAllowed).optional(),
  maxRegistryCredentialsAllowed: bounded(limitBounds.maxRegistryCredentialsAllowed).optional(),
  /** Beside the spec's four: function instances the account may hold at once, on every cluster together. */
  maxInstancesAllowed: bounded(limitBounds.maxInstancesAllowed).optional(),
  /** Input assets the account may keep (uploaded or waiting for their bytes), and the bytes of all of them together. */
  maxAssetsAllowed: bounded(limitBounds.maxAssetsAllowed).optional(),
  maxAssetBytesAllowed: bounded(limitBounds.maxAssetBytesAllowed).optional(),
});

export const accountSchema = z.object({
  ncaId: z.string(),
  name: z.string(),
  adminClientIds: z.array(z.string()),
  maxFunctionsAllowed: z.number().int(),
  maxTasksAllowed: z.number().int(),
  maxTelemetriesAllowed: z.number().int(),
  maxRegistryCredentialsAllowed: z.number().int(),
  maxInstancesAllowed: z.number().int(),
  maxAssetsAllowed: z.number().int(),
  maxAssetBytesAllowed: z.number().int(),
}).meta({ id: 'Account' });

export const createAccountSchema = accountLimitsSchema.extend({
  name: z.string().min(1).max(128).optional(),
  adminClientIds: z.array(z.string().min(1).max(128)).max(32).optional(),
});

export const accountParams = z.object({ ncaId: ncaIdSchema });
export const accountResponse = z.object({ account: accountSchema });
export const accountListResponse = z.object({ accounts: z.array(accountSchema) });

export type Account = z.infer<typeof accountSchema>;
export type AccountLimits = z.infer<typeof accountLimitsSchema>;
export type CreateAccount = z.infer<typeof createAccountSchema>;
