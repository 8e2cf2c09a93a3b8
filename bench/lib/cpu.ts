// CPU time of processes, read from /proc.
import { readFileSync } from 'node:fs';

/**
 * CPU time (user + system, µs) the processes have used so far, from /proc: per-request CPU is steadier than
 * throughput on a shared, noisy machine. Clock ticks are 10 ms (USER_HZ 100).
 */
export function cpuMicros(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * 10_000;
}
