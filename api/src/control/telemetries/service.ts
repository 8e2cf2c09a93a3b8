// Telemetries (the reference's /v2/svc/telemetries): endpoints an account exports its functions' and
// tasks' logs, metrics and traces to. The secret is sealed at rest, never returned, and opened only for
// the exporter (targetsOf). Other accounts' telemetries answer 404, and a function or task may name only
// its own account's (checkReferences).
import { randomUUID } from 'node:crypto';
import { BlockList, isIP } from 'node:net';
import type { Principal } from '../../domain/principal.ts';
import { conflict, invalid, notFound, type InvalidField } from '../../domain/problem.ts';
import type { SecretBox } from '../../store/encryption.ts';
import { isUniqueViolation } from '../../store/store.ts';
import type { AccountsService } from '../accounts/service.ts';
import type { TelemetriesRepo, TelemetryRow } from './repo.ts';
import {
  telemetrySecretValueSchema, type CreateTelemetry, type Telemetry, type TelemetryReferences, type TelemetrySecretValue, type TelemetryType,
} from './schema.ts';

/** What the exporter needs of one telemetry: where, how, and the secret in the clear. */
export interface ExportTarget {
  telemetryId: string;
  endpoint: string;
  protocol: Telemetry['protocol'];
  provider: Telemetry['provider'];
  types: TelemetryType[];
  secret: TelemetrySecretValue;
}

/** A function's or task's `telemetries` checked at create (400 unless each names a telemetry of the account). */
export type TelemetryReferenceCheck = (ncaId: string, references: TelemetryReferences | undefined) => Promise<void>;

const referenceTypes: Record<keyof TelemetryReferences, TelemetryType> = {
  logsTelemetryId: 'LOGS', metricsTelemetryId: 'METRICS', tracesTelemetryId: 'TRACES',
};

// Addresses a tenant's endpoint may not name unless the operator allows it: the platform's own host and networks.
const internal = new BlockList();
for (const [network, prefix] of [['127.0.0.0', 8], ['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['169.254.0.0', 16], ['0.0.0.0', 8], ['100.64.0.0', 10]] as const) {
  internal.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [['::1', 128], ['::', 128], ['fc00::', 7], ['fe80::', 10], ['::ffff:0:0', 96]] as const) internal.addSubnet(network, prefix, 'ipv6');

function namesInternalHost(endpoint: string): boolean {
  const host = new URL(endpoint).hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  const family = isIP(host);
  return family !== 0 && internal.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

function rulesOf(input: CreateTelemetry, allowInternalEndpoints: boolean): InvalidField[] {
  const errors: InvalidField[] = [];
  if (input.provider === 'PROMETHEUS' && input.protocol === 'GRPC') errors.push({ field: 'protocol', message: 'PROMETHEUS (remote-write) is HTTP' });
  if (input.provider === 'PROMETHEUS' && input.types.some((type) => type !== 'METRICS')) {
    errors.push({ field: 'types', message: 'PROMETHEUS (remote-write) carries METRICS only' });
  }
  if (!allowInternalEndpoints && namesInternalHost(input.endpoint)) {
    errors.push({ field: 'endpoint', message: 'must not name a loopback, private or link-local address (telemetry.allowInternalEndpoints)' });
  }
  return errors;
}

export interface TelemetriesServiceOptions {
  repo: TelemetriesRepo;
  accounts: AccountsService;
  box: SecretBox;
  allowInternalEndpoints: boolean;
  now?: () => Date;
  /** Told of a deleted telemetry, so exporting to it stops at once on this replica. */
  onDelete?: (telemetryId: string) => void;
}

export function createTelemetriesService(options: TelemetriesServiceOptions) {
  const { repo, accounts, box } = options;
  const now = options.now ?? (() => new Date());

  function toTelemetry(row: TelemetryRow): Telemetry {
    return {
      telemetryId: row.telemetry_id, name: row.name, endpoint: row.endpoint, protocol: row.protocol as Telemetry['protocol'],
      provider: row.provider as Telemetry['provider'], types: row.types, secret: { name: row.secret_name }, createdAt: row.created_at,
    };
  }

  return {
    async create(principal: Principal, input: CreateTelemetry): Promise<Telemetry> {
      const errors = rulesOf(input, options.allowInternalEndpoints);
      if (errors.length) throw invalid(errors);
      await accounts.checkQuota(principal.ncaId, 'telemetries', await repo.count(principal.ncaId));
      const row: TelemetryRow = {
        telemetry_id: randomUUID(), nca_id: principal.ncaId, name: input.name, endpoint: input.endpoint, protocol: input.protocol,
        provider: input.provider, types: [...new Set(input.types)], secret_name: input.secret.name,
        secret: box.encrypt(JSON.stringify(input.secret.value)), created_at: now().toISOString(),
      };
      try {
        await repo.insert(row);
      } catch (error) {
        if (isUniqueViolation(error)) throw conflict(`A telemetry named '${input.name}' already exists`);
        throw error;
      }
      return toTelemetry(row);
    },

    async list(principal: Principal): Promise<Telemetry[]> {
      return (await repo.list(principal.ncaId)).map(toTelemetry);
    },

    async get(principal: Principal, telemetryId: string): Promise<Telemetry> {
      const row = await repo.find(principal.ncaId, telemetryId);
      if (!row) throw notFound(`Telemetry '${telemetryId}' does not exist`);
      return toTelemetry(row);
    },

    async remove(principal: Principal, telemetryId: string): Promise<void> {
      if (!await repo.delete(principal.ncaId, telemetryId)) throw notFound(`Telemetry '${telemetryId}' does not exist`);
      options.onDelete?.(telemetryId);
    },

    /**
     * A function's or task's `telemetries` at create: each id must name a telemetry of the same account that
     * carries the signal (logsTelemetryId a LOGS one, ...); 400 naming the field otherwise.
     */
    async checkReferences(ncaId: string, references: TelemetryReferences | undefined, field = 'telemetries'): Promise<void> {
      const named = Object.entries(references ?? {}).filter((entry): entry is [keyof TelemetryReferences, string] => entry[1] !== undefined);
      if (named.length === 0) return;
      const found = new Map((await repo.findMany(ncaId, named.map(([, id]) => id))).map((row) => [row.telemetry_id, row]));
      const errors: InvalidField[] = [];
      for (const [key, id] of named) {
        const row = found.get(id);
        if (!row) errors.push({ field: `${field}.${key}`, message: `telemetry '${id}' does not exist in this account` });
        else if (!row.types.includes(referenceTypes[key])) {
          errors.push({ field: `${field}.${key}`, message: `telemetry '${id}' does not carry ${referenceTypes[key]} (its types: ${row.types.join(', ')})` });
        }
      }
      if (errors.length) throw invalid(errors);
    },

    /** For the exporter: the account's telemetries with these ids, secrets opened (one that does not open fails the read). */
    async targetsOf(ncaId: string, telemetryIds: string[]): Promise<ExportTarget[]> {
      return (await repo.findMany(ncaId, telemetryIds)).map((row) => ({
        telemetryId: row.telemetry_id, endpoint: row.endpoint, protocol: row.protocol as Telemetry['protocol'], provider: row.provider as Telemetry['provider'], types: row.types,
        secret: telemetrySecretValueSchema.parse(JSON.parse(box.decrypt(row.secret))),
      }));
    },
  };
}

export type TelemetriesService = ReturnType<typeof createTelemetriesService>;
