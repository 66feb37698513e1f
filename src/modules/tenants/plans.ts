export type Feature = 'access_api' | 'webhooks' | 'campaigns';
export type PlanName = 'free' | 'starter' | 'growth' | 'business';

export const PLAN_NAMES: PlanName[] = ['free', 'starter', 'growth', 'business'];

interface Plan {
  features: Feature[];
  /** Default daily request quota; -1 is unlimited. */
  apiRequestsDaily: number;
}

export const PLANS: Record<PlanName, Plan> = {
  free: { features: [], apiRequestsDaily: 0 },
  starter: { features: ['access_api'], apiRequestsDaily: 10_000 },
  growth: { features: ['access_api', 'webhooks', 'campaigns'], apiRequestsDaily: 10_000 },
  business: { features: ['access_api', 'webhooks', 'campaigns'], apiRequestsDaily: -1 },
};

const FEATURE_NAMES: Record<Feature, string> = {
  access_api: 'API access',
  webhooks: 'webhooks',
  campaigns: 'campaign sending',
};

export function planHasFeature(plan: string, feature: Feature): boolean {
  return PLANS[plan as PlanName]?.features.includes(feature) ?? false;
}

/** The plans that include a feature (for SQL that must honour the plan gate, such as the scheduler). */
export function plansWithFeature(feature: Feature): PlanName[] {
  return PLAN_NAMES.filter((name) => PLANS[name].features.includes(feature));
}

export function upgradeMessage(feature: Feature): string {
  return `Your plan does not include ${FEATURE_NAMES[feature]}. Upgrade your plan to use this feature.`;
}
