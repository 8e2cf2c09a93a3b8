// Request bodies shared by several test files.

export const echoBody = (overrides: Record<string, unknown> = {}) => ({
  name: 'echo', inferenceUrl: '/echo', inferencePort: 8000, containerImage: 'local/echo:1', ...overrides,
});

export const streamingBody = (overrides: Record<string, unknown> = {}) => ({
  name: 'stream', inferenceUrl: '/sign_in', inferencePort: 49100, containerImage: 'local/streaming-app:1', functionType: 'STREAMING',
  health: { protocol: 'HTTP', uri: '/v1/streaming/ready', port: 8011, timeout: 'PT10S', expectedStatusCode: 200 }, ...overrides,
});

export const localSpec = (overrides: Record<string, unknown> = {}) => ({
  gpu: 'LOCAL', instanceType: 'LOCAL.CPU_1x', minInstances: 1, maxInstances: 2, ...overrides,
});
