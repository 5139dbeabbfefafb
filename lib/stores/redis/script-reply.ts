import type { Outcome } from '../../algorithms/algorithm.types.js';
import { REPLY_WIDTH } from './decide.lua.js';

/** A script's answer for one request: per policy, an outcome and the time its state is as of. */
export interface Answer {
  outcomes: Outcome[];
  at: number[];
}

/** A decide call's answer for one request. */
export interface Reply extends Answer {
  /** When Redis decided, on the local clock, at the earliest (ms): Redis's time less the offset. */
  decidedAt: number;
}

/** `count` policies' outcomes from a script reply, `REPLY_WIDTH` numbers each from `start` (see `DECIDE_LUA`). */
export function parseAnswer(raw: readonly number[], start: number, count: number): Answer {
  const outcomes: Outcome[] = [];
  const at: number[] = [];
  for (let i = 0; i < count; i++) {
    const base = start + i * REPLY_WIDTH;
    outcomes.push({
      allowed: raw[base] === 1,
      remaining: raw[base + 1],
      retryMs: raw[base + 2],
      fullMs: raw[base + 3],
      nextMs: raw[base + 4],
      delayMs: raw[base + 5],
      blockedMs: raw[base + 6],
      at: raw[base + 7],
    });
    at.push(raw[base + 7]);
  }
  return { outcomes, at };
}
