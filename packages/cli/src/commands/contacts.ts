import { statSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { requireApiKey } from '../config.ts';
import { CliError, EXIT } from '../exit-codes.ts';
import { Api, PUBLIC_PREFIX } from '../http.ts';
import { importContacts, MAX_BATCH } from '../import/importer.ts';
import { ImportProgressView } from '../import/progress-view.ts';
import { emit, renderRecord } from '../output.ts';
import { integerAtLeast, positiveInt, type Runner } from './shared.ts';

interface ImportFlags {
  map?: string; tagSeparator: string; delimiter: string; source?: string; batchSize: number; concurrency: number;
  refusedFile?: string; stateFile?: string; restart?: boolean; progress: boolean;
}

export function registerContactCommands(program: Command, run: Runner): void {
  const contacts = program.command('contacts').description('contacts of the tenant of the API key (public API)');
  contacts.command('import').description('import contacts from a CSV file through the bulk endpoint; resumable')
    .argument('<file>', 'CSV file with a header row')
    .option('--map <pairs>', 'column mapping, e.g. phone=Mobile,first_name="Given name"; other fields are guessed from the header')
    .option('--tag-separator <sep>', 'separator of several tags in the tags column', ';')
    .option('--delimiter <char>', 'CSV field delimiter', ',')
    .option('--source <source>', 'contact source for rows without a source column (default: bulk)')
    .addOption(new Option('--batch-size <n>', `contacts per bulk request (at most ${MAX_BATCH})`).argParser(positiveInt).default(MAX_BATCH))
    .option('--concurrency <n>', 'bulk requests in flight', integerAtLeast(1), 4)
    .option('--refused-file <file>', 'CSV of the refused rows with their error (default: <file>.refused.csv)')
    .option('--state-file <file>', 'resume state (default: <file>.import-state.json)')
    .option('--restart', 'forget an earlier import of this file and start from the first row')
    .option('--no-progress', 'no progress bar (a wait for the rate limit is still told, one line each)')
    .action(run(async (config, opts: ImportFlags, file: string) => {
      const api = new Api(config.url, PUBLIC_PREFIX, requireApiKey(config));
      let size: number;
      try {
        size = statSync(file).size;
      } catch (err) {
        throw new CliError(`cannot read ${file}: ${(err as Error).message}`, EXIT.USAGE);
      }
      const abort = new AbortController();
      let interrupts = 0;
      const onSigint = () => {
        interrupts += 1;
        if (interrupts > 1) process.exit(EXIT.INTERRUPTED); // the state file still holds the last confirmed batch
        process.stderr.write('\nmsvc: interrupted; finishing the batches in flight (Ctrl-C again to quit now)\n');
        abort.abort();
      };
      process.on('SIGINT', onSigint);
      process.on('SIGTERM', onSigint);
      const view = new ImportProgressView(size, config.json ? 'json' : opts.progress && process.stderr.isTTY ? 'bar' : 'lines');
      api.onRateLimitWait = (wait) => view.rateLimitWait(wait);
      try {
        const summary = await importContacts({
          file, api, map: opts.map, tagSeparator: opts.tagSeparator, delimiter: opts.delimiter, source: opts.source,
          batchSize: Math.min(opts.batchSize, MAX_BATCH), concurrency: opts.concurrency,
          refusedFile: opts.refusedFile ?? `${file}.refused.csv`, stateFile: opts.stateFile ?? `${file}.import-state.json`,
          restart: Boolean(opts.restart), signal: abort.signal,
          onProgress: (p) => view.update(p),
        });
        view.stop();
        emit(config.json, summary, () => renderRecord({
          file: summary.file,
          status: summary.completed ? 'complete' : 'interrupted: run the same command again to resume',
          rows: summary.rows, created: summary.created, refused: summary.refused,
          'this run': `${summary.rows_this_run} rows in ${(summary.elapsed_ms / 1000).toFixed(1)} s (${summary.rows_per_second} rows/s)`,
          ...(summary.resumed_from_row > 0 ? { 'resumed after row': summary.resumed_from_row, 'batches answered from before': summary.replayed_batches } : {}),
          ...(summary.refused_file ? { 'refused rows': summary.refused_file } : {}),
        }, config.width));
        process.exitCode = summary.interrupted ? EXIT.INTERRUPTED : summary.refused > 0 ? EXIT.ROWS_REFUSED : EXIT.OK;
      } finally {
        view.stop();
        process.off('SIGINT', onSigint);
        process.off('SIGTERM', onSigint);
        await api.close();
      }
    }));
}
