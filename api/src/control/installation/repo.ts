// Installation-wide settings: written once at first start, read by every replica.
import type { Kysely } from 'kysely';
import type { z } from 'zod';
import type { SecretBox } from '../../store/encryption.ts';
import { decodeJson } from '../../store/json.ts';
import type { Database } from '../../store/schema.ts';
import { isUniqueViolation } from '../../store/store.ts';

/** A sealed setting's JSON, opened and decoded with the schema of its contract. */
export function unsealSetting<S extends z.ZodType>(box: SecretBox, schema: S, key: string, sealed: string): z.output<S> {
  return decodeJson(schema, box.decrypt(sealed), { table: 'settings', key, column: 'value' });
}

export function createSettingsRepo(db: Kysely<Database>) {
  return {
    async get(key: string): Promise<string | undefined> {
      const row = await db.selectFrom('settings').select('value').where('key', '=', key).executeTakeFirst();
      return row?.value;
    },
    async replace(key: string, value: string): Promise<void> {
      await db.updateTable('settings').set({ value }).where('key', '=', key).execute();
    },
    /** Replaces the value only if it is still `expected`: true for exactly one of several callers racing. */
    async compareAndSet(key: string, expected: string, value: string): Promise<boolean> {
      const result = await db.updateTable('settings').set({ value }).where('key', '=', key).where('value', '=', expected).executeTakeFirst();
      return result.numUpdatedRows === 1n;
    },
    /**
     * Stores `value` unless the key exists, and returns what is stored. Two replicas starting at once
     * agree on one value.
     */
    async getOrCreate(key: string, create: () => string, now: string): Promise<{ value: string; created: boolean }> {
      const existing = await this.get(key);
      if (existing !== undefined) return { value: existing, created: false };
      const value = create();
      try {
        await db.insertInto('settings').values({ key, value, created_at: now }).execute();
        return { value, created: true };
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
        return { value: (await this.get(key))!, created: false };
      }
    },
  };
}

export type SettingsRepo = ReturnType<typeof createSettingsRepo>;
