// The autoscaler's own metrics, on the platform's registry. Names follow the reference autoscaler's
// (observability: timeseries_db.*, nvcf_api.* → platform_api.*, distributed_lock.*, scaling.*) with
// Prometheus' underscores and an svc_ prefix.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { FUNCTION_LABELS } from '../http/metrics.ts';

const MS_BUCKETS = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000];
const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export function createAutoscalerMetrics(registry: Registry) {
  const registers = [registry];
  return {
    timeseriesRequests: new Counter({ name: 'svc_autoscaler_timeseries_db_requests_total', help: 'Queries to the metrics source, by outcome (ok, error)', labelNames: ['status'], registers }),
    timeseriesDuration: new Histogram({ name: 'svc_autoscaler_timeseries_db_request_duration_milliseconds', help: 'Metrics source query latency', buckets: MS_BUCKETS, registers }),
    timeseriesAuthFailures: new Counter({ name: 'svc_autoscaler_timeseries_db_auth_failure_total', help: 'Metrics source queries refused for credentials (401, 403)', registers }),
    timeseriesServerFailures: new Counter({ name: 'svc_autoscaler_timeseries_db_server_side_failure_total', help: 'Metrics source queries failed on its side (5xx)', registers }),
    platformApiDuration: new Histogram({
      name: 'svc_autoscaler_platform_api_request_duration_milliseconds', help: 'Calls into the deployment path (read deployments, apply desired counts), by outcome',
      labelNames: ['operation', 'status'], buckets: MS_BUCKETS, registers,
    }),
    lockHeld: new Gauge({ name: 'svc_autoscaler_distributed_lock', help: 'Discovery lock: 1 while this replica holds it (the leader), else 0', registers }),
    lockFailures: new Counter({ name: 'svc_autoscaler_distributed_lock_acquisition_failures_total', help: 'Attempts to take or renew the discovery lock that failed (held elsewhere, or store error)', registers }),
    discoveryDuration: new Histogram({ name: 'svc_autoscaler_function_discovery_duration_seconds', help: 'Duration of each discovery round', buckets: SECONDS_BUCKETS, registers }),
    roundDuration: new Histogram({ name: 'svc_autoscaler_scaling_round_duration_seconds', help: 'Duration of each scaling round (all versions)', buckets: SECONDS_BUCKETS, registers }),
    activeFunctions: new Gauge({ name: 'svc_autoscaler_active_functions', help: 'Function versions in the active set', registers }),
    processed: new Counter({ name: 'svc_autoscaler_requests_processed_total', help: 'Desired-count changes applied', registers }),
    rejected: new Counter({ name: 'svc_autoscaler_requests_rejected_total', help: 'Scaling skipped: not_deployable (status), platform_api_error (round stopped)', labelNames: ['reason'], registers }),
    desired: new Gauge({ name: 'svc_autoscaler_desired_instances', help: 'Desired instances per function version (last decision)', labelNames: FUNCTION_LABELS, registers }),
    current: new Gauge({ name: 'svc_autoscaler_current_instances', help: 'Instances held per function version when deciding', labelNames: FUNCTION_LABELS, registers }),
    utilization: new Gauge({ name: 'svc_autoscaler_utilization', help: 'Utilization percent used in the decision: (in-flight + queued) / (instances × maxRequestConcurrency)', labelNames: FUNCTION_LABELS, registers }),
    status: new Gauge({
      name: 'svc_autoscaler_status', help: 'Decision per function version as a reason code: 0 hold, 1 scale-up, 2 scale-down, 3 scale-to-zero, 4 keep-warm, 5 wait-stickiness, 6 no-metrics',
      labelNames: FUNCTION_LABELS, registers,
    }),
  };
}

export type AutoscalerMetrics = ReturnType<typeof createAutoscalerMetrics>;
