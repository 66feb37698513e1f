import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { CliError, EXIT } from './exit-codes.ts';

/** The global flags every command accepts (commander's optsWithGlobals()). */
export interface GlobalFlags {
  url?: string;
  adminToken?: string;
  apiKey?: string;
  profile?: string;
  config?: string;
  json?: boolean;
  dataDir?: string;
  width?: number;
}

export interface CliConfig {
  url: string;
  adminToken: string | undefined;
  apiKey: string | undefined;
  json: boolean;
  /** The service's DATA_DIR, where `listen` finds the development certificate. */
  dataDir: string;
  /** The widest a readable line (a table) may be: --width, COLUMNS, the terminal's width, else 80. */
  width: number;
}

interface Profile { url?: string; admin_token?: string; api_key?: string; data_dir?: string }

export const DEFAULT_URL = 'http://127.0.0.1:8080';
/** Output that is not a terminal (a pipe, a file) gets tables this wide unless told otherwise. */
export const DEFAULT_WIDTH = 80;
/** Narrower than this, a table cannot show even one column with its borders. */
export const MIN_WIDTH = 20;

/** COLUMNS as the shell exports it; anything that is not a usable width is ignored. */
function columnsFromEnv(value: string | undefined): number | undefined {
  const n = Number(value);
  return value && Number.isInteger(n) && n >= MIN_WIDTH ? n : undefined;
}
export const defaultProfileFile = (env: NodeJS.ProcessEnv) =>
  env.MSVC_CONFIG ?? join(env.XDG_CONFIG_HOME ?? join(homedir(), '.config'), 'msvc', 'config.json');

/**
 * Flags win over the environment (MSVC_URL, ADMIN_TOKEN, MSVC_API_KEY, DATA_DIR), which wins over
 * the profile file: JSON `{ "<profile>": { url, admin_token, api_key, data_dir } }` at --config,
 * MSVC_CONFIG or ~/.config/msvc/config.json, profile --profile, MSVC_PROFILE or "default".
 */
export function resolveConfig(flags: GlobalFlags, env: NodeJS.ProcessEnv = process.env, terminalColumns = process.stdout.isTTY ? process.stdout.columns : undefined): CliConfig {
  const file = flags.config ?? defaultProfileFile(env);
  const profileName = flags.profile ?? env.MSVC_PROFILE ?? 'default';
  const profile = readProfile(file, profileName, Boolean(flags.config || flags.profile || env.MSVC_PROFILE));
  const url = flags.url ?? env.MSVC_URL ?? profile.url ?? DEFAULT_URL;
  try {
    new URL(url);
  } catch {
    throw new CliError(`not a URL: ${url}`, EXIT.USAGE);
  }
  return {
    url: url.replace(/\/+$/, ''),
    adminToken: flags.adminToken ?? env.ADMIN_TOKEN ?? profile.admin_token,
    apiKey: flags.apiKey ?? env.MSVC_API_KEY ?? profile.api_key,
    json: Boolean(flags.json),
    dataDir: resolve(flags.dataDir ?? env.DATA_DIR ?? profile.data_dir ?? './data'),
    width: flags.width ?? columnsFromEnv(env.COLUMNS) ?? (terminalColumns || DEFAULT_WIDTH),
  };
}

/** The named profile; a missing file is no profile unless one was asked for by name or path. */
function readProfile(file: string, name: string, required: boolean): Profile {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !required) return {};
    throw new CliError(`cannot read the profile file ${file}: ${(err as Error).message}`, EXIT.USAGE);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new CliError(`the profile file ${file} is not JSON: ${(err as Error).message}`, EXIT.USAGE);
  }
  const profile = (parsed as Record<string, unknown> | null)?.[name];
  if (profile === undefined) {
    if (!required) return {};
    throw new CliError(`no profile "${name}" in ${file}`, EXIT.USAGE);
  }
  if (typeof profile !== 'object' || profile === null) throw new CliError(`profile "${name}" in ${file} is not an object`, EXIT.USAGE);
  return profile as Profile;
}

export function requireAdminToken(config: CliConfig): string {
  if (!config.adminToken) throw new CliError('no admin token: pass --admin-token, set ADMIN_TOKEN or add admin_token to the profile', EXIT.USAGE);
  return config.adminToken;
}

export function requireApiKey(config: CliConfig): string {
  if (!config.apiKey) throw new CliError('no API key: pass --api-key, set MSVC_API_KEY or add api_key to the profile', EXIT.USAGE);
  return config.apiKey;
}
