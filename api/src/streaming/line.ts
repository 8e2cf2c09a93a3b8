// The line: people waiting for an instance of a STREAMING function, first come, first served, one line
// per function (a session may use any deployed version, or the one it names). Lines are short (people,
// not requests: at most streaming.maxLineLength), so plain arrays serve.

export interface InLine {
  id: string;
  functionId: string;
}

export function createLine<T extends InLine>() {
  const lines = new Map<string, T[]>();

  return {
    join(item: T): void {
      const line = lines.get(item.functionId);
      if (line) line.push(item);
      else lines.set(item.functionId, [item]);
    },

    /** Takes an item out wherever it stands; false when it was not in line. */
    leave(item: T): boolean {
      const line = lines.get(item.functionId);
      const index = line?.indexOf(item) ?? -1;
      if (!line || index === -1) return false;
      line.splice(index, 1);
      if (line.length === 0) lines.delete(item.functionId);
      return true;
    },

    /** 1-based place in its line, or 0 when not in line. */
    position(item: T): number {
      return (lines.get(item.functionId)?.indexOf(item) ?? -1) + 1;
    },

    length(functionId: string): number {
      return lines.get(functionId)?.length ?? 0;
    },

    /** A copy of every non-empty line, each in order: callers may change the lines while they go through it. */
    snapshot(): T[][] {
      return [...lines.values()].map((line) => [...line]);
    },

    get empty(): boolean {
      return lines.size === 0;
    },
  };
}

export type Line<T extends InLine> = ReturnType<typeof createLine<T>>;
