import { validationError } from '../../http/errors.ts';
import { DestinationRefusedError, hostOf, resolveDestination } from './webhooks.ssrf.ts';

/**
 * Checks a webhook URL at create and update: HTTPS, no credentials, and (unless private networks
 * are allowed) a host that resolves only to public addresses. The deliverer checks again at every
 * attempt, because DNS answers change.
 */
export async function validateEndpointUrl(raw: string, allowPrivateNetworks: boolean): Promise<string> {
  const loc = ['body', 'url'];
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw validationError('url must be a valid absolute URL', loc, raw);
  }
  if (url.protocol !== 'https:') throw validationError('url must use HTTPS', loc, raw);
  if (url.username || url.password) throw validationError('url must not contain credentials', loc, raw);
  if (!hostOf(url)) throw validationError('url must have a host', loc, raw);
  if (!allowPrivateNetworks) {
    try {
      await resolveDestination(hostOf(url), false);
    } catch (err) {
      if (err instanceof DestinationRefusedError) {
        throw validationError('url must resolve only to public addresses (loopback, private, link-local and reserved networks are refused)', loc, raw);
      }
      throw validationError(`url host could not be resolved: ${hostOf(url)}`, loc, raw);
    }
  }
  return url.toString();
}
