// Types for the streaming browser client the console server serves as stream/stream-client.ts
// (streaming-app/client/stream-client.ts and the two modules it imports).
export * from '../../../streaming-app/client/stream-client.ts';
