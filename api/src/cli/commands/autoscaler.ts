// Autoscaler commands: run the autoscaler role on its own, and show why each function version has the
// instances it has.
import { functionScalingResponse } from '../../autoscaler/schema.ts';
import { loadConfig } from '../../config.ts';
import { call, CliError } from '../client.ts';
import { startAutoscalerRole } from '../../roles/autoscaler.ts';
import { untilStopped } from '../../roles/stopped.ts';
import { table } from '../format.ts';
import { SVC_COMMAND } from '../../roles/svc-command.ts';
import type { Command } from '../command.ts';

const autoscaler: Command = {
  summary: 'Run the function autoscaler on its own (discovery under the store lock, scaling, health, /metrics)',
  role: true,
  async run({ env }) {
    const config = loadConfig(env);
    const settings = config.autoscaler;
    const role = await startAutoscalerRole({ store: config.store, settings, metrics: config.metrics, secrets: config.secrets, logLevel: config.log.level });
    console.log([
      `svc autoscaler running as ${role.replicaId}`,
      `  Health   http://localhost:${role.port}/admin/health/readiness   /health`,
      `  Metrics  http://localhost:${role.port}/metrics${role.metricsToken ? `   (bearer: ${SVC_COMMAND} metrics token)` : ''}`,
      `  Load from ${settings.prometheusUrl ? 'Prometheus (SVC_PROMETHEUS_URL)' : 'this process only: set SVC_PROMETHEUS_URL so it sees the API replicas'}`,
    ].join('\n'));
    await untilStopped();
    await role.close();
  },
};

const status: Command = {
  summary: "Each deployed function version's instances, desired count and why",
  usage: '[--function-id ID]',
  options: { 'function-id': { type: 'string' } },
  async run(context) {
    const { state, values } = context;
    const bearer = state.apiKey ?? state.token;
    if (!bearer) throw new CliError('no credential: run `svc init` (and `svc api-key generate`), or set SVC_TOKEN / SVC_API_KEY');
    const { functions } = await call(state, 'api', 'GET', '/v2/svc/autoscaler/functions', functionScalingResponse, { bearer });
    const shown = functions.filter((fn) => !values['function-id'] || fn.functionId === values['function-id']);
    const rows = shown.map((fn) => ({
      name: fn.functionName, versionId: fn.functionVersionId, status: fn.functionStatus,
      instances: fn.instances.starting ? `${fn.instances.running}+${fn.instances.starting} starting` : String(fn.instances.running),
      desired: fn.desiredInstances, bounds: `${fn.minInstances}-${fn.maxInstances}`, policy: fn.policy, reason: fn.reason, why: fn.detail,
    }));
    context.print(table(rows, ['name', 'versionId', 'status', 'instances', 'desired', 'bounds', 'policy', 'reason', 'why']), { functions: shown });
  },
};

export const autoscalerCommands: Record<string, Command> = {
  autoscaler,
  'autoscaler status': status,
};
