// The invocation queue: FIFO per function version. An instance takes at most maxRequestConcurrency
// requests at once; the rest wait here. In-process now; a NATS JetStream implementation can replace it
// behind the same interface.

export interface Queued {
  id: string;
  versionId: string;
}

export interface InvocationQueue<T extends Queued> {
  /** Adds at the tail; `front` puts a request that could not start back at the head. */
  enqueue(item: T, options?: { front?: boolean }): void;
  /** Removes and returns the head of a version's queue. */
  take(versionId: string): T | undefined;
  /** Removes a waiting request (its client went away). */
  remove(id: string): boolean;
  /** 1-based position among the version's waiting requests, or undefined when not waiting. */
  position(id: string): { versionId: string; position: number } | undefined;
  depth(versionId: string): number;
}

/** Arrays with a moving head: O(1) enqueue and take, O(n) position, which only status calls pay. */
export function createInProcessQueue<T extends Queued>(): InvocationQueue<T> {
  const queues = new Map<string, { items: (T | undefined)[]; head: number; size: number }>();
  const where = new Map<string, string>();

  function queueOf(versionId: string) {
    let queue = queues.get(versionId);
    if (!queue) queues.set(versionId, queue = { items: [], head: 0, size: 0 });
    return queue;
  }

  return {
    enqueue(item, options) {
      const queue = queueOf(item.versionId);
      if (options?.front && queue.head > 0) queue.items[--queue.head] = item;
      else if (options?.front) queue.items.unshift(item);
      else queue.items.push(item);
      queue.size++;
      where.set(item.id, item.versionId);
    },
    take(versionId) {
      const queue = queues.get(versionId);
      while (queue && queue.head < queue.items.length) {
        const item = queue.items[queue.head];
        queue.items[queue.head++] = undefined;
        if (queue.head > 1024 && queue.head * 2 > queue.items.length) {
          queue.items = queue.items.slice(queue.head);
          queue.head = 0;
        }
        if (item) {
          queue.size--;
          where.delete(item.id);
          return item;
        }
      }
      return undefined;
    },
    remove(id) {
      const versionId = where.get(id);
      const queue = versionId ? queues.get(versionId) : undefined;
      if (!queue) return false;
      const index = queue.items.findIndex((item, i) => i >= queue.head && item?.id === id);
      if (index === -1) return false;
      queue.items[index] = undefined;
      queue.size--;
      where.delete(id);
      return true;
    },
    position(id) {
      const versionId = where.get(id);
      const queue = versionId ? queues.get(versionId) : undefined;
      if (!versionId || !queue) return undefined;
      let position = 0;
      for (let i = queue.head; i < queue.items.length; i++) {
        if (queue.items[i]) position++;
        if (queue.items[i]?.id === id) return { versionId, position };
      }
      return undefined;
    },
    depth(versionId) {
      return queues.get(versionId)?.size ?? 0;
    },
  };
}
