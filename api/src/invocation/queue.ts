// The InvocationQueue contract: who waits, in what order, and which instance slot each request gets.
// Two implementations keep it: LocalQueue (in-process, one API replica: the embedded default) and
// JetStreamQueue (NATS JetStream, several replicas on one store). Fifo is the data structure under both.
import type { ReadyInstance } from '../control/instances/service.ts';
import type { Invocation } from './invocation.ts';

/**
 * Requests wait here for a slot; the queue hands each its slot with `invocation.grant(grant)`, and the
 * request's runner (service.ts) awaits `invocation.granted()`.
 */
export interface InvocationQueue {
  /** Adds a request at the tail of its version's queue; a full queue is a 429 Problem. */
  enqueue(invocation: Invocation): void | Promise<void>;
  /** Puts a request that never reached its instance (or moved to another version) back at the head. */
  requeue(invocation: Invocation): void;
  /** Takes out a waiting request (its client left); false when it is no longer waiting. */
  remove(invocation: Invocation): boolean | Promise<boolean>;
  /** 1-based place among the version's waiting requests; undefined when not waiting (here). */
  position(invocation: Invocation): number | undefined | Promise<number | undefined>;
  /** Requests waiting for the version (for 429s, queue details and the load metrics). */
  depth(versionId: string): number;
  /** The instances of a version that take requests now (from placement). */
  ready(versionId: string, instances: ReadyInstance[]): void;
  /** The versions placement still knows: what is kept for any other (a shared queue's streams and keys) is deleted. */
  retain?(versionIds: ReadonlySet<string>): void | Promise<void>;
  /** Told the instances of a version whenever the set changes (connection pools follow it). */
  onInstances(seen: (versionId: string, instances: ReadyInstance[]) => void): void;
  close(): Promise<void>;
}

/** A queue several API replicas share: each 202'd request is answered by whichever replica is asked. */
export interface SharedQueue extends InvocationQueue {
  readonly replicaId: string;
  /** Whether a replica still answers. */
  alive(replica: string): Promise<boolean>;
  /** Tells every replica a stored request has its result. */
  completed(requestId: string): void;
  /** Resolves when completed(requestId) is heard, or after `ms`. */
  whenCompleted(requestId: string, ms: number): Promise<void>;
}

export function isShared(queue: InvocationQueue): queue is SharedQueue {
  return 'replicaId' in queue;
}

/** FIFO with a moving head: O(1) push, shift and unshift; O(n) removal and position, which only leaving clients and status calls pay. */
export class Fifo<T extends { id: string }> {
  #items: (T | undefined)[] = [];
  #head = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  push(item: T) {
    this.#items.push(item);
    this.#size++;
  }

  unshift(item: T) {
    if (this.#head > 0) this.#items[--this.#head] = item;
    else this.#items.unshift(item);
    this.#size++;
  }

  shift(): T | undefined {
    while (this.#head < this.#items.length) {
      const item = this.#items[this.#head];
      this.#items[this.#head++] = undefined;
      if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
        this.#items = this.#items.slice(this.#head);
        this.#head = 0;
      }
      if (item) {
        this.#size--;
        return item;
      }
    }
    return undefined;
  }

  remove(id: string): boolean {
    const index = this.#indexOf(id);
    if (index === -1) return false;
    this.#items[index] = undefined;
    this.#size--;
    return true;
  }

  /** 1-based position, or undefined when not here. */
  position(id: string): number | undefined {
    let position = 0;
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i];
      if (!item) continue;
      position++;
      if (item.id === id) return position;
    }
    return undefined;
  }

  #indexOf(id: string): number {
    for (let i = this.#head; i < this.#items.length; i++) if (this.#items[i]?.id === id) return i;
    return -1;
  }
}
