// How many instances each GPU specification of a deployment should run, and the demand that wakes a
// version held at zero. Pure but for Demand, which remembers what the invocation plane last said.
import type { GpuSpecification } from '../deployments/schema.ts';

/** Per specification: the autoscaler's desired count (else minInstances), within [minInstances, maxInstances]. */
export function targetsOf(specs: GpuSpecification[], desired?: Map<string, number>): Map<string, number> {
  return new Map(specs.map((spec) => [spec.gpuSpecificationId,
    Math.min(spec.maxInstances, Math.max(spec.minInstances, desired?.get(spec.gpuSpecificationId) ?? spec.minInstances))]));
}

/**
 * The specification a version wakes on when every target is zero: the lowest preferredOrder (unset counts
 * as 100), the first listed on a tie. Undefined when some specification already has instances to run.
 */
export function wakeSpecOf(targets: Map<string, number>, specs: GpuSpecification[]): GpuSpecification | undefined {
  if ([...targets.values()].some((count) => count > 0)) return undefined;
  return specs.map((spec, index) => ({ spec, index }))
    .sort((a, b) => (a.spec.preferredOrder ?? 100) - (b.spec.preferredOrder ?? 100) || a.index - b.index)[0]?.spec;
}

/** Requests waiting or in flight per version, as the invocation plane and the session broker report them. */
export class Demand {
  readonly #count = new Map<string, number>();
  /** versionId → when it last had demand (ms). */
  readonly #last = new Map<string, number>();

  /** Records a version's count; true when the version starts to wait (had none before). */
  set(versionId: string, count: number, at: number): boolean {
    const before = this.#count.get(versionId) ?? 0;
    if (count === 0) {
      this.#count.delete(versionId);
      return false;
    }
    this.#count.set(versionId, count);
    this.#last.set(versionId, at);
    return before === 0;
  }

  waiting(versionId: string): boolean {
    return (this.#count.get(versionId) ?? 0) > 0;
  }

  /** Whether the version had demand within `windowMs` before `at`. */
  within(versionId: string, at: number, windowMs: number): boolean {
    return at - (this.#last.get(versionId) ?? Number.NEGATIVE_INFINITY) < windowMs;
  }

  /** Forgets when versions that are no longer deployed last had demand. */
  keepOnly(deployed: Map<string, unknown>): void {
    for (const versionId of this.#last.keys()) if (!deployed.has(versionId)) this.#last.delete(versionId);
  }
}
