/**
 * Coalesces concurrent single-row statements (writes, or a keyed read) into one statement: every submission made in the same
 * turn of the event loop is written together (up to `maxBatch`), and each caller gets its own
 * result after the shared statement has committed. On a busy send path this turns N round trips
 * (each a socket write and a context switch into PostgreSQL, which profiles show dominate) into
 * one. A failed batch is retried one row at a time, so one bad row fails only its own caller.
 */
export class StatementBatcher<I, O> {
  private queue: { input: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;

  constructor(private writeMany: (inputs: I[]) => Promise<O[]>, private maxBatch = 200) {}

  submit(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ input, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const batches: (typeof this.queue)[] = [];
    while (this.queue.length > 0) batches.push(this.queue.splice(0, this.maxBatch));
    await Promise.all(batches.map(async (batch) => {
      try {
        const outputs = await this.writeMany(batch.map((b) => b.input));
        batch.forEach((b, i) => b.resolve(outputs[i]));
      } catch (err) {
        if (batch.length === 1) return batch[0].reject(err);
        await Promise.all(batch.map(async (b) => {
          try {
            b.resolve((await this.writeMany([b.input]))[0]);
          } catch (single) {
            b.reject(single);
          }
        }));
      }
    }));
  }
}
