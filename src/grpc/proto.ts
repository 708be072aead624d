// Loads proto/ctxprobe/v1/ctxprobe.proto with @grpc/proto-loader at run time; its types
// come from src/grpc/generated (npm run proto:types).
import path from 'node:path';
import { PACKAGE_ROOT } from '../common/paths.js';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProtoGrpcType } from './generated/ctxprobe.js';
import { installStrictUtf8 } from './strict-utf8.js';

export const PROTO_DIR = path.join(PACKAGE_ROOT, 'proto');
export const PROTO_FILE = 'ctxprobe/v1/ctxprobe.proto';

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

/** The package, typed by the types generated from the same proto (scripts/proto-types.mjs). */
export function loadPackage() {
  installStrictUtf8();
  const def = protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as ProtoGrpcType;
  return { def, v1: pkg.ctxprobe.v1 };
}
