import { Command, CommanderError, Option } from 'commander';
import { DEFAULT_WIDTH, MIN_WIDTH, resolveConfig, type GlobalFlags } from './config.ts';
import { CliError, EXIT } from './exit-codes.ts';
import { ApiError } from './http.ts';
import { registerAdminCommands } from './commands/admin.ts';
import { registerCampaignCommands } from './commands/campaigns.ts';
import { registerContactCommands } from './commands/contacts.ts';
import { registerDeliveryCommands } from './commands/deliveries.ts';
import { registerListenCommand } from './commands/listen.ts';
import { integerAtLeast, type Runner } from './commands/shared.ts';

export function buildProgram(): Command {
  const program = new Command('msvc')
    .description('Operator CLI of the messaging service: the operator API (/admin/v1) with ADMIN_TOKEN, the public API with a tenant key (MSVC_API_KEY)')
    .version('0.1.0')
    .addOption(new Option('--url <url>', 'service base URL (env MSVC_URL; default http://127.0.0.1:8080)'))
    .addOption(new Option('--admin-token <token>', 'operator API token (env ADMIN_TOKEN)'))
    .addOption(new Option('--api-key <key>', 'tenant API key for public-API commands (env MSVC_API_KEY)'))
    .addOption(new Option('--profile <name>', 'profile in the profile file (env MSVC_PROFILE; default "default")'))
    .addOption(new Option('--config <file>', 'profile file (env MSVC_CONFIG; default ~/.config/msvc/config.json)'))
    .addOption(new Option('--data-dir <dir>', 'the service\'s DATA_DIR, for `listen` (env DATA_DIR; default ./data)'))
    .addOption(new Option('--width <columns>', `widest line of a table (env COLUMNS; default the terminal's width, else ${DEFAULT_WIDTH})`).argParser(integerAtLeast(MIN_WIDTH)))
    .option('--json', 'machine-readable JSON output (never cut to a width)')
    .showHelpAfterError()
    .exitOverride();
  program.addHelpText('after', `
Exit codes: 0 ok, 1 failure (network, 5xx), 2 usage or configuration, 3 refused by the service (4xx),
4 authentication or scope (401/403), 5 import finished with refused rows, 6 watched campaign ended
STOPPED or FAILED, 130 interrupted (an import resumes when run again).`);

  const run: Runner = (action) => async (...args: unknown[]) => {
    const command = args.at(-1) as Command;
    const config = resolveConfig(command.optsWithGlobals() as GlobalFlags);
    await action(config, command.opts() as never, ...args.slice(0, -2));
  };
  registerAdminCommands(program, run);
  registerContactCommands(program, run);
  registerListenCommand(program, run);
  registerCampaignCommands(program, run);
  registerDeliveryCommands(program, run);
  for (const command of allCommands(program)) command.exitOverride().showHelpAfterError();
  return program;
}

function allCommands(command: Command): Command[] {
  return command.commands.flatMap((c) => [c, ...allCommands(c)]);
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.OK;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version end with 0; any other parse error was already printed by commander.
      return err.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    }
    const json = argv.includes('--json');
    if (err instanceof CliError) {
      if (json) {
        const error = err instanceof ApiError
          ? { status: err.status, code: err.code, message: err.message, request_id: err.requestId, details: err.details }
          : { message: err.message };
        process.stderr.write(`${JSON.stringify({ error })}\n`);
      } else {
        process.stderr.write(`msvc: ${err.message}${err instanceof ApiError && err.requestId ? ` (request ${err.requestId})` : ''}\n`);
      }
      return err.exitCode;
    }
    process.stderr.write(`msvc: unexpected error: ${(err as Error).stack ?? String(err)}\n`);
    return EXIT.FAILURE;
  }
}
