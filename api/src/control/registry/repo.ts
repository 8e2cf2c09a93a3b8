// Store access for registry credentials. The artifact types and tags are decoded here, with the schema
// the credentials are answered with; the secret stays sealed until the runtime asks for it.
import type { Kysely, Selectable } from 'kysely';
import { decodeJson } from '../../store/json.ts';
import type { Database, RegistryCredentialsTable } from '../../store/schema.ts';
import { registryCredentialSchema, type RegistryCredential } from './schema.ts';

type StoredCredential = Selectable<RegistryCredentialsTable>;

/** A registry credential as stored, its artifact types and tags decoded. */
export type RegistryCredentialRow = Omit<StoredCredential, 'artifact_types' | 'tags'> & {
  artifact_types: RegistryCredential['artifactTypes'];
  tags: string[];
};

function decode(row: StoredCredential): RegistryCredentialRow {
  const where = (column: string) => ({ table: 'registry_credentials', key: row.id, column });
  return {
    ...row,
    artifact_types: decodeJson(registryCredentialSchema.shape.artifactTypes, row.artifact_types, where('artifact_types')),
    tags: decodeJson(registryCredentialSchema.shape.tags, row.tags, where('tags')),
  };
}

function encode(changes: Partial<RegistryCredentialRow>): Partial<StoredCredential> {
  const { artifact_types: types, tags, ...plain } = changes;
  return { ...plain, ...(types ? { artifact_types: JSON.stringify(types) } : {}), ...(tags ? { tags: JSON.stringify(tags) } : {}) };
}

export function createRegistryRepo(db: Kysely<Database>) {
  const select = () => db.selectFrom('registry_credentials').selectAll();
  return {
    async insert(row: RegistryCredentialRow): Promise<void> {
      await db.insertInto('registry_credentials').values(encode(row) as StoredCredential).execute();
    },
    async find(ncaId: string, id: string): Promise<RegistryCredentialRow | undefined> {
      const row = await select().where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return row && decode(row);
    },
    async list(ncaId: string): Promise<RegistryCredentialRow[]> {
      return (await select().where('nca_id', '=', ncaId).orderBy('created_at').execute()).map(decode);
    },
    /** The sealed secret of the account's credential for a registry host (hostnames are stored lower case). */
    async sealedSecretFor(ncaId: string, hostname: string): Promise<string | undefined> {
      const row = await db.selectFrom('registry_credentials').select('secret').where('nca_id', '=', ncaId).where('hostname', '=', hostname)
        .orderBy('created_at').executeTakeFirst();
      return row?.secret;
    },
    async count(ncaId: string): Promise<number> {
      const row = await db.selectFrom('registry_credentials').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('nca_id', '=', ncaId).executeTakeFirstOrThrow();
      return Number(row.n);
    },
    async update(id: string, changes: Partial<RegistryCredentialRow>): Promise<void> {
      await db.updateTable('registry_credentials').set(encode(changes)).where('id', '=', id).execute();
    },
    async delete(ncaId: string, id: string): Promise<boolean> {
      const result = await db.deleteFrom('registry_credentials').where('nca_id', '=', ncaId).where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) > 0;
    },
  };
}

export type RegistryRepo = ReturnType<typeof createRegistryRepo>;
