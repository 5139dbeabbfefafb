/**
 * An error made without capturing a stack trace. For the errors that are answers, not faults (a
 * refusal, a client that went away): nobody reads their stack, and capturing one through Nest's
 * async call chain costs more than the rest of the refusal (a flood of refused requests is
 * exactly when it must be cheap).
 */
export function withoutStack<E extends Error>(make: () => E): E {
  const depth = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return make();
  } finally {
    Error.stackTraceLimit = depth;
  }
}
