// The part of node-turn (untyped) the platform uses.
declare module 'node-turn' {
  interface TurnOptions {
    listeningPort?: number;
    listeningIps?: string[];
    relayIps?: string[];
    minPort?: number;
    maxPort?: number;
    authMech?: 'none' | 'short-term' | 'long-term';
    credentials?: Record<string, string>;
    realm?: string;
    debugLevel?: string;
  }
  export default class Turn {
    constructor(options: TurnOptions);
    start(): void;
    stop(): void;
    addUser(username: string, password: string): void;
    removeUser(username: string): void;
  }
}
