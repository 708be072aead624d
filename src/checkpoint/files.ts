// Reading the JSON files of a checkpoint folder or a model repository: any failure names
// the file and says what is wrong with it (not a bare parser message).
import fs from 'node:fs';
import { CheckpointError, type CtxprobeError } from '../common/errors.js';

/** The JSON object in `file`; `Err` is the error to throw (checkpoint or setting). */
export function readJsonObject(file: string, Err: new (message: string) => CtxprobeError = CheckpointError): Record<string, any> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new Err(`${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Err(`${file}: not valid JSON (${(e as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Err(`${file}: a JSON object is required`);
  return value as Record<string, any>;
}
