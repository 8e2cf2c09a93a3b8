// Registry credential contracts (wire-reference 6).
import { z } from 'zod';

export const artifactTypes = ['CONTAINER', 'HELM', 'MODEL', 'RESOURCE'] as const;
const artifactType = z.preprocess((value) => typeof value === 'string' ? value.toUpperCase() : value, z.enum(artifactTypes));
const hostname = z.string().regex(/^(?=.{1,253}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:\d{1,5})?$/i,
  'must be a registry hostname such as nvcr.io or registry.example.com:5000');
const tags = z.array(z.string().regex(/^[a-zA-Z0-9\-_:=]+$/, 'must match [a-zA-Z0-9-_:=]+').max(128)).max(64);

export const registrySecretSchema = z.object({
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,47}$/, 'must be 1-48 letters, digits, _, . or -'),
  /** Typically base64 of "user:password" (for ECR: base64 of "KEY_ID:SECRET"). */
  value: z.string().min(1).max(16_384),
});

export const createRegistryCredentialSchema = z.object({
  registryHostname: hostname,
  secret: registrySecretSchema,
  artifactTypes: z.array(artifactType).min(1).default(['CONTAINER']),
  tags: tags.optional(),
  description: z.string().max(256).optional(),
});

export const updateRegistryCredentialSchema = z.object({
  secret: registrySecretSchema.optional(),
  /** The reference's PATCH names the list artifactTypeEnums; artifactTypes is accepted too. */
  artifactTypeEnums: z.array(artifactType).min(1).optional(),
  artifactTypes: z.array(artifactType).min(1).optional(),
  tags: tags.optional(),
  description: z.string().max(256).optional(),
});

export const registryCredentialSchema = z.object({
  registryCredentialId: z.string(),
  ncaId: z.string(),
  registryCredentialName: z.string(),
  registryName: z.string(),
  registryHostname: z.string(),
  artifactTypes: z.array(z.enum(artifactTypes)),
  tags: z.array(z.string()),
  description: z.string().optional(),
  provisionedBy: z.enum(['SYSTEM', 'USER']),
  createdAt: z.string(),
  lastUpdatedAt: z.string(),
}).meta({ id: 'RegistryCredential' });

export const registryCredentialParams = z.object({ registryCredentialId: z.guid('must be a registry credential id (UUID)') });
export const registryCredentialResponse = z.object({ registryCredential: registryCredentialSchema });
export const registryCredentialListResponse = z.object({ registryCredentials: z.array(registryCredentialSchema) });

const registry = z.object({ name: z.string(), hostname: z.string() });
export const recognizedRegistriesResponse = z.object({
  recognizedRegistries: z.object({
    CONTAINER: z.array(registry), HELM: z.array(registry), MODEL: z.array(registry), RESOURCE: z.array(registry),
  }),
});

export type CreateRegistryCredential = z.infer<typeof createRegistryCredentialSchema>;
export type UpdateRegistryCredential = z.infer<typeof updateRegistryCredentialSchema>;
export type RegistryCredential = z.infer<typeof registryCredentialSchema>;
