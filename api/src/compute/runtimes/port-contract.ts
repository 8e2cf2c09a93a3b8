// The port contract between a runtime and the program it runs. Which ports an instance has depends on the
// function; the numbers are the runtime's choice (free host ports for the process runtime, the function's
// declared container ports for docker), told to the program through the environment:
//   PORT, INFERENCE_PORT   the inference port (inferenceUrl is served here)
//   HEALTH_PORT            = the inference port, unless the function's health.port differs from its
//                            inferencePort: then a port of its own
// STREAMING functions (spec 4.6) also get
//   STREAMING_SERVER_PORT  = the inference port (signaling WebSocket)
//   CONTROL_SERVER_PORT    its own port; the health port (GET /v1/streaming/ready)
//   STREAMING_START_ENDPOINT = inferenceUrl
//   STREAMING_PORT_BINDING_RANGE = "<min>-<max>", this instance's block of the agent's UDP pool
import type { InstanceSpec, PortMap } from '../protocol.ts';

export interface PortNeeds {
  streaming: boolean;
  /** A second TCP port: the control server (STREAMING), or the health port when it differs from inference. */
  second: boolean;
  /** The health check goes to the second port (health.port differs from inferencePort). */
  healthOnSecond: boolean;
}

export function portNeeds(spec: InstanceSpec): PortNeeds {
  const streaming = spec.functionType === 'STREAMING';
  const healthOnSecond = spec.health.port !== spec.inferencePort;
  return { streaming, second: streaming || healthOnSecond, healthOnSecond };
}

/** The PortMap for the ports a runtime chose (`second` when needs.second, `udpRange` when streaming). */
export function portMap(needs: PortNeeds, inference: number, second?: number, udpRange?: [number, number]): PortMap {
  const health = needs.healthOnSecond && second !== undefined ? second : inference;
  if (!needs.streaming) return { inference, health };
  return { inference, health, streaming: inference, control: second, udpRange };
}

export function portEnvironment(spec: InstanceSpec, ports: PortMap): Record<string, string> {
  const env: Record<string, string> = {
    PORT: String(ports.inference),
    INFERENCE_PORT: String(ports.inference),
    HEALTH_PORT: String(ports.health),
  };
  if (spec.functionType === 'STREAMING') {
    env.STREAMING_SERVER_PORT = String(ports.streaming ?? ports.inference);
    if (ports.control !== undefined) env.CONTROL_SERVER_PORT = String(ports.control);
    env.STREAMING_START_ENDPOINT = spec.inferenceUrl;
    if (ports.udpRange) env.STREAMING_PORT_BINDING_RANGE = `${ports.udpRange[0]}-${ports.udpRange[1]}`;
  }
  return env;
}
