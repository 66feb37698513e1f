// Public exports of the package for tenants' receivers and tooling.
export { verifyWebhookSignature, type VerifyWebhookSignatureInput } from './modules/webhooks/verify-signature.ts';
