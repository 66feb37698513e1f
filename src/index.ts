// Public exports of the package for tenants' receivers and tooling.
export {};
