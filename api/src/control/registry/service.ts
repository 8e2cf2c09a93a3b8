// Registry credentials (wire-reference 6): the secret is sealed at rest and never returned; the
// runtime reads it back to pull images (pullAuthFor).
import { randomUUID } from 'node:crypto';
import type { Principal } from '../../domain/principal.ts';
import { conflict, notFound } from '../../domain/problem.ts';
import type { SecretBox } from '../../store/encryption.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { RegistryCredentialRow, RegistryRepo } from './repo.ts';
import type { CreateRegistryCredential, RegistryCredential, UpdateRegistryCredential } from './schema.ts';

const registries = {
  CONTAINER: [
    { name: 'NGC', hostname: 'nvcr.io' },
    { name: 'Docker Hub', hostname: 'docker.io' },
    { name: 'GitHub Container Registry', hostname: 'ghcr.io' },
    { name: 'Amazon ECR Public', hostname: 'public.ecr.aws' },
    { name: 'Amazon ECR', hostname: '*.dkr.ecr.*.amazonaws.com' },
    { name: 'Azure Container Registry', hostname: '*.azurecr.io' },
    { name: 'Google Artifact Registry', hostname: '*-docker.pkg.dev' },
    { name: 'Quay', hostname: 'quay.io' },
    { name: 'Harbor', hostname: '*' },
  ],
  HELM: [{ name: 'NGC', hostname: 'helm.ngc.nvidia.com' }, { name: 'OCI registry', hostname: '*' }],
  MODEL: [{ name: 'NGC', hostname: 'api.ngc.nvidia.com' }],
  RESOURCE: [{ name: 'NGC', hostname: 'api.ngc.nvidia.com' }],
};

function matches(pattern: string, host: string): boolean {
  const expression = new RegExp(`^${pattern.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('[^/]*')}$`, 'i');
  return expression.test(host);
}

/** The recognised registry a hostname belongs to, or the hostname itself. */
export function registryName(hostname: string): string {
  const host = hostname.replace(/:\d+$/, '');
  return registries.CONTAINER.find((registry) => registry.hostname !== '*' && matches(registry.hostname, host))?.name ?? host;
}

/** The registry host an image reference names: its first segment when that looks like a host (has a dot). */
export function registryHostOf(image: string | undefined): string | undefined {
  const first = image?.includes('/') ? image.split('/')[0] : undefined;
  return first?.includes('.') ? first : undefined;
}

/** What a runtime pulls an image with (the agent link's registryAuth). */
export interface PullAuth {
  hostname: string;
  secret: string;
}

export function createRegistryService(repo: RegistryRepo, accounts: AccountsService, box: SecretBox, now: () => Date = () => new Date()) {
  function toCredential(row: RegistryCredentialRow): RegistryCredential {
    return {
      registryCredentialId: row.id,
      ncaId: row.nca_id,
      registryCredentialName: row.name,
      registryName: registryName(row.hostname),
      registryHostname: row.hostname,
      artifactTypes: row.artifact_types,
      tags: row.tags,
      ...(row.description ? { description: row.description } : {}),
      provisionedBy: 'USER',
      createdAt: row.created_at,
      lastUpdatedAt: row.updated_at,
    };
  }

  async function requireCredential(ncaId: string, id: string) {
    const row = await repo.find(ncaId, id);
    if (!row) throw notFound(`Registry credential '${id}' does not exist`);
    return row;
  }

  return {
    recognizedRegistries: () => registries,

    async create(principal: Principal, input: CreateRegistryCredential): Promise<RegistryCredential> {
      await accounts.checkQuota(principal.ncaId, 'registryCredentials', await repo.count(principal.ncaId));
      const at = now().toISOString();
      const row: RegistryCredentialRow = {
        id: randomUUID(), nca_id: principal.ncaId, name: input.secret.name, hostname: input.registryHostname.toLowerCase(),
        artifact_types: [...new Set(input.artifactTypes)], tags: input.tags ?? [],
        description: input.description ?? '', secret: box.encrypt(input.secret.value), created_at: at, updated_at: at,
      };
      try {
        await repo.insert(row);
      } catch (error) {
        if (isUniqueViolation(error)) throw conflict(`A registry credential named '${input.secret.name}' already exists`);
        throw error;
      }
      return toCredential(row);
    },

    async list(principal: Principal): Promise<RegistryCredential[]> {
      return (await repo.list(principal.ncaId)).map(toCredential);
    },

    async get(principal: Principal, id: string): Promise<RegistryCredential> {
      return toCredential(await requireCredential(principal.ncaId, id));
    },

    async update(principal: Principal, id: string, input: UpdateRegistryCredential): Promise<RegistryCredential> {
      const row = await requireCredential(principal.ncaId, id);
      const changes: Partial<RegistryCredentialRow> = { updated_at: now().toISOString() };
      if (input.secret) Object.assign(changes, { name: input.secret.name, secret: box.encrypt(input.secret.value) });
      const types = input.artifactTypeEnums ?? input.artifactTypes;
      if (types) changes.artifact_types = [...new Set(types)];
      if (input.tags) changes.tags = input.tags;
      if (input.description !== undefined) changes.description = input.description;
      try {
        await repo.update(row.id, changes);
      } catch (error) {
        if (isUniqueViolation(error)) throw conflict(`A registry credential named '${input.secret?.name}' already exists`);
        throw error;
      }
      return toCredential({ ...row, ...changes });
    },

    async remove(principal: Principal, id: string): Promise<void> {
      if (!await repo.delete(principal.ncaId, id)) throw notFound(`Registry credential '${id}' does not exist`);
    },

    /** For a runtime pulling `image`: the account's credential for the image's registry host, decrypted, if it has one. */
    async pullAuthFor(ncaId: string, image: string | undefined): Promise<PullAuth | undefined> {
      const hostname = registryHostOf(image);
      const sealed = hostname && await repo.sealedSecretFor(ncaId, hostname.toLowerCase());
      return hostname && sealed ? { hostname, secret: box.decrypt(sealed) } : undefined;
    },
  };
}

export type RegistryService = ReturnType<typeof createRegistryService>;
