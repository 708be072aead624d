/** For `switch` over a discriminated union: a new variant is a compile error here. */
export function unreachable(value: never): never {
  throw new Error(`unhandled variant ${JSON.stringify(value)}`);
}
