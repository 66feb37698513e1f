import { getCountries, getCountryCallingCode, parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/max';

/**
 * Meta prices a message by the recipient's market: a country with a rate of its own on the card
 * (Brazil, India, United Kingdom...), else the region the country belongs to (Rest of Africa...),
 * else Other. Which countries stand alone is the card's business (Meta moves countries out of their
 * regions from one card to the next: nine on 2026-10-01), so a number resolves to candidates, most
 * specific first, and the card in effect picks the first it has.
 *
 * Regions as Meta's pricing page lists them by country calling code
 * (https://developers.facebook.com/docs/whatsapp/pricing, "Country calling codes"), with the
 * countries since given rates of their own kept in their former region (for older cards).
 */
export const REGIONS: Record<string, readonly string[]> = {
  'North America': ['US', 'CA'],
  'Rest of Africa': [
    'DZ', 'AO', 'BJ', 'BW', 'BF', 'BI', 'CM', 'TD', 'CG', 'ER', 'ET', 'GA', 'GM', 'GH', 'GW', 'CI', 'KE', 'LS', 'LR', 'LY', 'MG', 'MW',
    'ML', 'MR', 'MA', 'MZ', 'NA', 'NE', 'RW', 'SN', 'SL', 'SO', 'SS', 'SD', 'SZ', 'TZ', 'TG', 'TN', 'UG', 'ZM', 'ZW',
  ],
  'Rest of Asia Pacific': ['AF', 'AU', 'BD', 'KH', 'CN', 'HK', 'JP', 'LA', 'MN', 'NP', 'NZ', 'PG', 'PH', 'SG', 'LK', 'TW', 'TJ', 'TH', 'TM', 'UZ', 'VN'],
  'Rest of Central & Eastern Europe': ['AL', 'AM', 'AZ', 'BY', 'BG', 'HR', 'CZ', 'GE', 'GR', 'HU', 'LV', 'LT', 'MD', 'MK', 'PL', 'RO', 'RS', 'SK', 'SI', 'UA'],
  'Rest of Latin America': ['BO', 'CR', 'DO', 'EC', 'SV', 'GT', 'HT', 'HN', 'JM', 'NI', 'PA', 'PY', 'PR', 'UY', 'VE'],
  'Rest of Middle East': ['BH', 'IQ', 'JO', 'KW', 'LB', 'OM', 'QA', 'YE'],
  'Rest of Western Europe': ['AT', 'BE', 'DK', 'FI', 'IE', 'NO', 'PT', 'SE', 'CH'],
};
export const OTHER = 'Other';

/** Meta's names for countries where the English name of the region differs. */
const META_NAMES: Partial<Record<string, string>> = { TR: 'Turkey', HK: 'Hong Kong', CZ: 'Czech Republic' };

const displayNames = new Intl.DisplayNames('en', { type: 'region' });
const regionOf = new Map(Object.entries(REGIONS).flatMap(([region, countries]) => countries.map((c) => [c, region] as const)));
const nameOf = new Map(getCountries().map((c) => [c as string, META_NAMES[c] ?? displayNames.of(c) ?? c]));
/** A country's market name -> its ISO code (a card may give any country a rate of its own). */
const countryByName = new Map([...nameOf].map(([iso, name]) => [name, iso]));
/** Countries Meta's card of 2026-10-01 gives rates of their own (the regions list the rest). */
const STANDALONE = [
  'AR', 'BD', 'BR', 'CL', 'CO', 'EG', 'FR', 'DE', 'HK', 'HU', 'IN', 'ID', 'IQ', 'IL', 'IT', 'KZ', 'KW', 'MY', 'MX', 'MA', 'NL', 'NP', 'NG', 'OM',
  'PK', 'PE', 'PL', 'QA', 'RO', 'RU', 'SA', 'SG', 'ZA', 'ES', 'LK', 'TR', 'UA', 'AE', 'GB',
];
const listed = new Set([...regionOf.keys(), ...STANDALONE]);
/**
 * Calling code -> the listed country Meta prices it as, for a number of a territory not listed on
 * its own (Jersey's +44 as the United Kingdom, Åland's +358 as Finland): Meta maps by calling code.
 * Not for +1: a NANP territory not listed (the Bahamas, Barbados...) is Other, as Meta's table has it.
 */
const listedByCallingCode = new Map<string, string>();
for (const iso of listed) {
  const code = getCountryCallingCode(iso as CountryCode);
  // +7: Russia and Kazakhstan are both listed; libphonenumber tells them apart by the number.
  if (code !== '1' && !listedByCallingCode.has(code)) listedByCallingCode.set(code, iso);
}

/** Whether `name` is a market a card may price: a country (by Meta's name), a region, or Other. */
export function isMarketName(name: string): boolean {
  return name === OTHER || name in REGIONS || countryByName.has(name);
}

/** The country (ISO 3166 alpha-2, libphonenumber's region) a phone number is priced as, or null. */
export function countryOf(phone: string): string | null {
  // Each message's statuses ask about its number again; parsing is the costly part.
  let country = countries.get(phone);
  if (country === undefined) {
    country = parsedCountryOf(phone);
    if (countries.size >= MAX_REMEMBERED_PHONES) countries.clear();
    countries.set(phone, country);
  }
  return country;
}

const countries = new Map<string, string | null>();
const MAX_REMEMBERED_PHONES = 10_000;

function parsedCountryOf(phone: string): string | null {
  const parsed = parsePhoneNumberFromString(phone);
  if (!parsed) return null;
  if (parsed.country && listed.has(parsed.country)) return parsed.country;
  return (parsed.countryCallingCode !== '1' ? listedByCallingCode.get(parsed.countryCallingCode) : undefined) ?? parsed.country ?? null;
}

/** The markets a phone number may be priced in, most specific first: its country, its region, Other. */
export function marketCandidates(phone: string): string[] {
  const country = countryOf(phone);
  if (!country) return [OTHER];
  const region = regionOf.get(country);
  return [nameOf.get(country) ?? country, ...(region ? [region] : []), OTHER];
}
