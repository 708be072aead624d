// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

export const Intervention = {
  /**
   * in `interventions`: refused; in `subset_intervention`: mask
   */
  INTERVENTION_UNSPECIFIED: 'INTERVENTION_UNSPECIFIED',
  /**
   * the chunk's text deleted, the rest re-tokenised
   */
  INTERVENTION_REMOVE: 'INTERVENTION_REMOVE',
  /**
   * the chunk's keys hidden from every later query (a BOS at 0 stays visible)
   */
  INTERVENTION_MASK: 'INTERVENTION_MASK',
} as const;

export type Intervention =
  /**
   * in `interventions`: refused; in `subset_intervention`: mask
   */
  | 'INTERVENTION_UNSPECIFIED'
  | 0
  /**
   * the chunk's text deleted, the rest re-tokenised
   */
  | 'INTERVENTION_REMOVE'
  | 1
  /**
   * the chunk's keys hidden from every later query (a BOS at 0 stays visible)
   */
  | 'INTERVENTION_MASK'
  | 2

export type Intervention__Output = typeof Intervention[keyof typeof Intervention]
