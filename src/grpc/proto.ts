// The API's definition (src/api/proto.ts) as grpc-js service definitions and clients,
// typed by the types generated from the same proto.
import * as grpc from '@grpc/grpc-js';
import type { ProtoGrpcType } from '../api/generated/ctxprobe.js';
import { loadDefinition } from '../api/proto.js';

export function loadPackage() {
  const def = loadDefinition();
  const pkg = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
  return { def, v1: pkg.ctxprobe.v1 };
}
