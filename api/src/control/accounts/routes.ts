// Account administration (spec 4.2, 5.4): admin JWT, or a credential carrying account_setup.
import { access } from '../../http/auth.ts';
import { route } from '../../http/route.ts';
import { accountLimitsSchema, accountListResponse, accountParams, accountResponse, createAccountSchema } from './schema.ts';
import type { AccountsService, BootstrapAccount } from './service.ts';

const tag = 'Accounts';

export function accountRoutes(accounts: AccountsService, defaultLimits: BootstrapAccount['limits']) {
  return [
    route({
      method: 'GET', path: '/v2/svc/accounts', summary: 'List accounts', tag, access: access.accountAdmin,
      responses: { 200: { description: 'Accounts visible to the caller', schema: accountListResponse } },
      handle: async ({ principal }) => ({ body: { accounts: await accounts.list(principal) } }),
    }),
    route({
      method: 'POST', path: '/v2/svc/accounts/{ncaId}', summary: 'Create an account', tag, access: access.accountAdmin,
      params: accountParams, body: createAccountSchema,
      responses: { 200: { description: 'The new account', schema: accountResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { account: await accounts.create(principal, params.ncaId, body, defaultLimits) },
      }),
    }),
    route({
      method: 'GET', path: '/v2/svc/accounts/{ncaId}', summary: 'Get an account and its limits', tag, access: access.accountAdmin,
      params: accountParams,
      responses: { 200: { description: 'The account', schema: accountResponse } },
      handle: async ({ principal, params }) => ({ body: { account: await accounts.get(principal, params.ncaId) } }),
    }),
    route({
      method: 'PATCH', path: '/v2/svc/accounts/{ncaId}', summary: 'Change account limits', tag, access: access.accountAdmin,
      params: accountParams, body: accountLimitsSchema,
      responses: { 200: { description: 'The account with its new limits', schema: accountResponse } },
      handle: async ({ principal, params, body }) => ({
        body: { account: await accounts.updateLimits(principal, params.ncaId, body) },
      }),
    }),
  ];
}
