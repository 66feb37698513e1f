import { readFileSync } from 'node:fs';
import type { components } from '../../../sdk/src/generated/schema.ts';
import { CliError, EXIT } from '../exit-codes.ts';

export type CampaignCreateBody = components['schemas']['CampaignCreate'];

export interface CreateFlags {
  file?: string;
  name?: string;
  template?: string;
  description?: string;
  batchSize?: number;
  groups?: string[];
  sources?: string[];
  mapping?: string;
  bodyFields?: string[];
  scheduledAt?: string;
}

/**
 * The create body (spec 4.1): the JSON of --file when given, with each flag set replacing its
 * field (--groups and --sources each replace their half of the audience). --mapping takes JSON
 * text or @file; --body-fields is the short form of the common mapping, the body's placeholders
 * filled in order from contact fields.
 */
export function campaignCreateBody(flags: CreateFlags): CampaignCreateBody {
  const base = flags.file ? readJsonObject(flags.file, '--file') : {};
  if (flags.mapping !== undefined && flags.bodyFields !== undefined) throw new CliError('--mapping and --body-fields both describe the variable mapping: pass one', EXIT.USAGE);
  const body: Record<string, unknown> = { ...base };
  const set = (field: string, value: unknown) => { if (value !== undefined) body[field] = value; };
  set('name', flags.name);
  set('template_id', flags.template);
  set('description', flags.description);
  set('batch_size', flags.batchSize);
  set('scheduled_at', flags.scheduledAt);
  if (flags.groups !== undefined || flags.sources !== undefined) {
    const audience = (typeof base.audience === 'object' && base.audience !== null ? base.audience : {}) as Record<string, unknown>;
    body.audience = { ...audience, ...(flags.groups !== undefined ? { groups: flags.groups } : {}), ...(flags.sources !== undefined ? { sources: flags.sources } : {}) };
  }
  if (flags.mapping !== undefined) {
    body.variable_mapping = flags.mapping.startsWith('@') ? readJsonObject(flags.mapping.slice(1), '--mapping') : parseJsonObject(flags.mapping, '--mapping');
  }
  if (flags.bodyFields !== undefined) {
    body.variable_mapping = { components: [{ type: 'body', parameters: flags.bodyFields.map((field) => ({ kind: 'contact_field', field })) }] };
  }
  if (typeof body.name !== 'string' || body.name === '') throw new CliError('a campaign needs a name: pass --name or put "name" in --file', EXIT.USAGE);
  if (typeof body.template_id !== 'string' || body.template_id === '') throw new CliError('a campaign needs a template: pass --template <id> or put "template_id" in --file', EXIT.USAGE);
  return body as CampaignCreateBody;
}

function readJsonObject(file: string, flag: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CliError(`${flag}: cannot read ${file}: ${(err as Error).message}`, EXIT.USAGE);
  }
  return parseJsonObject(text, `${flag} ${file}`);
}

function parseJsonObject(text: string, what: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new CliError(`${what} is not JSON: ${(err as Error).message}`, EXIT.USAGE);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new CliError(`${what} is not a JSON object`, EXIT.USAGE);
  return parsed as Record<string, unknown>;
}
