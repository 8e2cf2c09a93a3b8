// Component health (spec 2.5, 4.8): each component answers a probe within a deadline. Liveness never
// calls these; readiness and /health do.

export interface HealthComponent {
  name: string;
  probe(): Promise<void>;
}

export interface ComponentHealth {
  status: 'healthy' | 'unhealthy';
  latencyMs: number;
  error?: string;
}

export interface HealthReport {
  status: 'healthy' | 'unhealthy';
  components: Record<string, ComponentHealth>;
}

const PROBE_DEADLINE_MS = 2000;

async function probeOne(component: HealthComponent): Promise<ComponentHealth> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${PROBE_DEADLINE_MS} ms`)), PROBE_DEADLINE_MS);
  });
  try {
    await Promise.race([component.probe(), deadline]);
    return { status: 'healthy', latencyMs: Math.round(performance.now() - started) };
  } catch (error) {
    // The message names the failure class only; connection strings stay out of it.
    const message = (error as { code?: string }).code ?? (error as Error).message.split('\n')[0].slice(0, 120);
    return { status: 'unhealthy', latencyMs: Math.round(performance.now() - started), error: message };
  } finally {
    clearTimeout(timer);
  }
}

export function createHealthService(components: HealthComponent[]) {
  return {
    async report(): Promise<HealthReport> {
      const results = await Promise.all(components.map(probeOne));
      const report: HealthReport = { status: 'healthy', components: {} };
      components.forEach((component, index) => {
        report.components[component.name] = results[index];
        if (results[index].status === 'unhealthy') report.status = 'unhealthy';
      });
      return report;
    },
  };
}

export type HealthService = ReturnType<typeof createHealthService>;
