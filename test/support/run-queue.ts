import { closeSync, openSync, readSync } from 'node:fs';

/**
 * How long this process's JS thread (or the main thread of process `pid`) has waited for a CPU
 * while runnable, ms (Linux schedstat; 0 where it cannot be read, and then the raw latency is
 * what is checked).
 */
export class RunQueueWait {
  private readonly fd: number | undefined;
  private readonly buffer = Buffer.alloc(128);

  constructor(pid = process.pid) {
    try {
      this.fd = openSync(`/proc/${pid}/task/${pid}/schedstat`, 'r');
    } catch {
      this.fd = undefined;
    }
  }

  get available(): boolean {
    return this.fd !== undefined;
  }

  ms(): number {
    if (this.fd === undefined) return 0;
    const length = readSync(this.fd, this.buffer, 0, this.buffer.length, 0);
    return Number(this.buffer.toString('latin1', 0, length).split(' ')[1]) / 1e6;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
  }
}
