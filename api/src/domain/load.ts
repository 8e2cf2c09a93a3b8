// What the planes report about a function version: the load metrics, the autoscaler and /metrics read it.

/** A function version as its metric labels name it. */
export interface FunctionRef {
  ncaId: string;
  functionId: string;
  versionId: string;
}

/** The invocation plane's load on one version now. */
export interface FunctionLoad extends FunctionRef {
  queued: number;
  inflight: number;
  /** Ms since epoch of the latest request; undefined when none since start. */
  lastRequestAt?: number;
}

/** Placement's instances of one version now. */
export interface FunctionInstances extends FunctionRef {
  running: number;
  starting: number;
}
