// A child process running `svc autoscaler` (startAutoscalerRole) for the replica tests: argv[2] is JSON
// {store, settings, replicaId}. Prints one line {"port": N} once listening; a SIGKILL is its crash.
import { startAutoscalerRole } from '../../src/roles/autoscaler.ts';
import { autoscalerSettingsSchema } from '../../src/autoscaler/settings.ts';

const { store, settings, replicaId } = JSON.parse(process.argv[2]);
const role = await startAutoscalerRole({ store, settings: autoscalerSettingsSchema.parse(settings), logLevel: 'warn', replicaId });
console.log(JSON.stringify({ port: role.port }));
process.on('SIGTERM', () => void role.close().then(() => process.exit(0)));
