// Every service's bodies (the kinds of body, transport-free: method-kinds.ts), keyed by the
// proto's full service name: what the gRPC server registers and HTTP/JSON transcodes.
import type { Service } from '../serving/service.js';
import type { ScoringHandlers } from './generated/ctxprobe/v1/Scoring.js';
import type { ProbingHandlers } from './generated/ctxprobe/v1/Probing.js';
import type { GenerationHandlers } from './generated/ctxprobe/v1/Generation.js';
import type { Methods } from './method-kinds.js';
import { scoringMethods } from './scoring.js';
import { probingMethods } from './probing.js';
import { generationMethods } from './generation.js';

/** Every service's bodies, keyed by the proto's full service name. */
export function apiServices(service: Service) {
  return {
    'ctxprobe.v1.Scoring': scoringMethods(service),
    'ctxprobe.v1.Probing': probingMethods(service),
    'ctxprobe.v1.Generation': generationMethods(service),
  } satisfies Record<string, Methods<ScoringHandlers> | Methods<ProbingHandlers> | Methods<GenerationHandlers>>;
}
