/**
 * Which CSV column fills which contact field. Explicit `--map field=Column` pairs win; other
 * fields are guessed from the header (case, spaces, dashes and underscores ignored); every column
 * left over goes into custom_fields under its header.
 */
export const CONTACT_FIELDS = ['first_name', 'last_name', 'phone', 'email', 'company', 'job_title', 'status', 'tags', 'source'] as const;
export type ContactField = (typeof CONTACT_FIELDS)[number];

const ALIASES: Record<ContactField, string[]> = {
  first_name: ['firstname', 'first', 'givenname', 'forename', 'name', 'fullname'],
  last_name: ['lastname', 'last', 'surname', 'familyname'],
  phone: ['phone', 'phonenumber', 'mobile', 'mobilenumber', 'mobilephone', 'cell', 'cellphone', 'msisdn', 'tel', 'telephone', 'whatsapp', 'whatsappnumber'],
  email: ['email', 'emailaddress', 'mail', 'email1'],
  company: ['company', 'companyname', 'organization', 'organisation', 'org', 'business'],
  job_title: ['jobtitle', 'title', 'position', 'role'],
  status: ['status', 'contactstatus'],
  tags: ['tags', 'tag', 'labels', 'label', 'groups', 'group'],
  source: ['source', 'leadsource'],
};

const normalise = (header: string) => header.toLowerCase().replace(/[\s_\-.]/g, '');

export interface Mapping {
  /** Contact field -> CSV header. */
  fields: Partial<Record<ContactField, string>>;
  /** Headers that go into custom_fields. */
  custom: string[];
}

export class MappingError extends Error {}

/** `--map` text: `field=Column,field=Column`. */
export function parseMapFlag(text: string | undefined): Partial<Record<ContactField, string>> {
  const fields: Partial<Record<ContactField, string>> = {};
  for (const pair of (text ?? '').split(',').map((s) => s.trim()).filter(Boolean)) {
    const eq = pair.indexOf('=');
    const field = pair.slice(0, eq).trim() as ContactField;
    const column = pair.slice(eq + 1).trim();
    if (eq < 1 || !column) throw new MappingError(`--map expects field=Column pairs, got "${pair}"`);
    if (!CONTACT_FIELDS.includes(field)) throw new MappingError(`--map: unknown contact field "${field}" (one of ${CONTACT_FIELDS.join(', ')})`);
    fields[field] = column;
  }
  return fields;
}

export function buildMapping(headers: string[], explicit: Partial<Record<ContactField, string>>): Mapping {
  for (const [field, column] of Object.entries(explicit)) {
    if (!headers.includes(column)) throw new MappingError(`--map ${field}=${column}: no such column (columns: ${headers.join(', ')})`);
  }
  const fields: Partial<Record<ContactField, string>> = { ...explicit };
  const taken = new Set(Object.values(explicit));
  for (const field of CONTACT_FIELDS) {
    if (fields[field]) continue;
    // Aliases in order of preference: "first name" beats "name" when both are there.
    for (const alias of ALIASES[field]) {
      const header = headers.find((h) => !taken.has(h) && normalise(h) === alias);
      if (header) {
        fields[field] = header;
        taken.add(header);
        break;
      }
    }
  }
  if (!fields.phone) throw new MappingError(`no phone column found (columns: ${headers.join(', ')}); name it with --map phone=<column>`);
  if (!fields.first_name) throw new MappingError(`no first-name column found (columns: ${headers.join(', ')}); name it with --map first_name=<column>`);
  return { fields, custom: headers.filter((h) => !taken.has(h) && h !== '') };
}

/**
 * A contact create body from one CSV record. Empty cells are left out (the service would refuse an
 * empty email, for instance), tags are split on `tagSeparator`; the phone is sent as written, so a
 * number that is not E.164 is refused by the service with its suggestion and lands in the refused file.
 */
export function toContact(record: Record<string, string | undefined>, mapping: Mapping, options: { tagSeparator: string; source?: string }): Record<string, unknown> {
  const contact: Record<string, unknown> = {};
  for (const [field, header] of Object.entries(mapping.fields) as [ContactField, string][]) {
    const value = record[header]?.trim();
    if (!value) continue;
    contact[field] = field === 'tags' ? value.split(options.tagSeparator).map((t) => t.trim()).filter(Boolean) : value;
  }
  if (options.source && contact.source === undefined) contact.source = options.source;
  // first_name and phone are required: sent even when empty, so the service names the problem.
  contact.first_name ??= '';
  contact.phone ??= '';
  const custom: Record<string, string> = {};
  for (const header of mapping.custom) {
    const value = record[header]?.trim();
    if (value) custom[header] = value;
  }
  if (Object.keys(custom).length > 0) contact.custom_fields = custom;
  return contact;
}
