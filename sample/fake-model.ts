import { setTimeout as sleep } from 'node:timers/promises';

/** One message of a chat, as OpenAI's chat completions API takes it. */
export interface ChatMessage {
  role: string;
  content: string;
}

/** The longest answer the model gives, tokens: a model's output limit. */
const LONGEST_ANSWER = 16_384;

/** The tokens a prompt counts: one per 4 characters of its messages' contents, rounded up. */
export function promptTokens(messages: readonly ChatMessage[]): number {
  return Math.ceil(messages.reduce((chars, { content }) => chars + content.length, 0) / 4);
}

/**
 * A stand-in for a language model, so the sample runs offline and its answers can be tested: an
 * answer is a function of the prompt alone. "count to N" is answered `1 2 3 … N` (N tokens: the way
 * to ask for a long answer); anything else is echoed back. A token is a word with its leading
 * space, as a tokenizer's pieces are; a prompt counts one token per 4 characters of its messages,
 * OpenAI's rule of thumb for English.
 *
 * @example new FakeModel(50).answer([{ role: 'user', content: 'count to 3' }]) // ['1', ' 2', ' 3']
 */
export class FakeModel {
  /** @param tokensPerSecond how fast `stream` gives an answer's tokens (a hosted model: 50 to 200) */
  constructor(readonly tokensPerSecond = 50) {}

  /** The answer to the last message, as tokens: at most `maxTokens` of them, the model's longest at most. */
  answer(messages: readonly ChatMessage[], maxTokens = LONGEST_ANSWER): string[] {
    const prompt = messages.at(-1)?.content ?? '';
    const count = /count to (\d+)/i.exec(prompt);
    const length = Math.min(maxTokens, LONGEST_ANSWER);
    const words = count
      ? Array.from({ length: Math.min(Number(count[1]), length) }, (_, i) => String(i + 1))
      : `You said: ${prompt}`.split(/\s+/).filter(Boolean).slice(0, length);
    return words.map((word, i) => (i === 0 ? word : ` ${word}`));
  }

  /**
   * The answer's tokens as a model streams them, `tokensPerSecond` of them a second (those that fall
   * due while it waits come together), until it is done or `signal` aborts.
   */
  async *stream(messages: readonly ChatMessage[], maxTokens?: number, signal?: AbortSignal): AsyncGenerator<string> {
    const started = performance.now();
    const tokens = this.answer(messages, maxTokens);
    for (let i = 0; i < tokens.length; i++) {
      const wait = started + (i * 1000) / this.tokensPerSecond - performance.now();
      if (wait >= 1) await sleep(wait, undefined, { signal }).catch(() => undefined);
      if (signal?.aborted) return;
      yield tokens[i];
    }
  }
}
