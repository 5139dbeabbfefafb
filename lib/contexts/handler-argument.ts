import type { ExecutionContext } from '@nestjs/common';

/**
 * The argument of a handler's call that its interceptors and its parameter decorators both see,
 * one per call: Nest hands each a list of its own, with the same objects in it. HTTP: the request;
 * GraphQL: the field's `info`; a microservice: its context (else its payload); a gateway: its
 * payload when it is an object, else the client's socket. `undefined` when there is none.
 */
export function handlerArgument(context: ExecutionContext): object | undefined {
  const args = context.getArgs<unknown[]>();
  const type = context.getType<string>();
  const picked: unknown =
    type === 'http'
      ? args[0]
      : type === 'graphql'
        ? args[3]
        : type === 'rpc'
          ? isObject(args[1])
            ? args[1]
            : args[0]
          : isObject(args[1])
            ? args[1]
            : args[0];
  return isObject(picked) ? picked : undefined;
}

function isObject(value: unknown): value is object {
  return (typeof value === 'object' && value !== null) || typeof value === 'function';
}
