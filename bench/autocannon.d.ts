/**
 * The part of autocannon's programmatic API the benchmarks use (autocannon ships no types; see
 * its README, "API"). Called without a callback, it returns a promise of the result.
 */
declare module 'autocannon' {
  interface Request {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    /** Called before each request is sent; returns the request to send. */
    setupRequest?: (request: Request & { headers: Record<string, string> }, context: object) => Request;
    /** Called with each response; header names as the server wrote them. */
    onResponse?: (status: number, body: string, context: object, headers: Record<string, string | string[]>) => void;
  }

  interface Options {
    url: string;
    connections?: number;
    pipelining?: number;
    /** Seconds. */
    duration?: number;
    /** Requests to send in all, in place of a duration. */
    amount?: number;
    headers?: Record<string, string>;
    requests?: Request[];
  }

  interface Result {
    /** Seconds the run took. */
    duration: number;
    errors: number;
    timeouts: number;
    requests: { total: number; average: number };
    /** Responses by status code. */
    statusCodeStats: Record<string, { count: number }>;
  }

  export default function autocannon(options: Options): Promise<Result>;
}
