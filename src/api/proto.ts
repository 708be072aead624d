// The API's one definition: proto/ctxprobe/v1/ctxprobe.proto, loaded with
// @grpc/proto-loader at run time (both transports read it: gRPC serves its services,
// the HTTP/JSON transcoder its `google.api.http` rules); its types come from
// src/api/generated (npm run proto:types).
import path from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import { PACKAGE_ROOT } from '../common/paths.js';
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

let loaded: protoLoader.PackageDefinition | undefined;

/** The package definition: services with their methods' (de)serialisers and options. */
export function loadDefinition(): protoLoader.PackageDefinition {
  installStrictUtf8();
  return (loaded ??= protoLoader.loadSync(PROTO_FILE, LOADER_OPTIONS));
}
