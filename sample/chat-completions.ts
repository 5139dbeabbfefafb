import { randomUUID } from 'node:crypto';
import { BadRequestException, NotFoundException } from '@nestjs/common';
import { type ChatMessage, promptTokens } from './fake-model.js';

/** The one model the sample serves. */
export const MODEL = 'fake-gpt';

/** Tokens reserved for the answer of a request that sets no `max_tokens`: a typical answer's. */
const TYPICAL_ANSWER = 500;

/** A chat completion request, as read from OpenAI's body (`model`, `messages`, `max_tokens`, `stream`). */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  /** `max_completion_tokens` or `max_tokens`: the longest answer asked for; `undefined`, the model's longest. */
  maxTokens: number | undefined;
  stream: boolean;
}

/** The request a body asks for, or why OpenAI's API would refuse it (a 400). */
function readChatRequest(body: unknown): ChatRequest | string {
  const {
    model = MODEL,
    messages,
    max_tokens,
    max_completion_tokens,
    stream = false,
  } = (body ?? {}) as Record<string, unknown>;
  const isMessage = (m: unknown) =>
    typeof (m as ChatMessage | null)?.role === 'string' && typeof (m as ChatMessage).content === 'string';
  if (typeof model !== 'string') return '"model" must be a string';
  if (!Array.isArray(messages) || messages.length === 0 || !messages.every(isMessage))
    return '"messages" must be a non-empty list of { role, content } with string contents';
  const maxTokens = max_completion_tokens ?? max_tokens;
  if (maxTokens !== undefined && !(Number.isSafeInteger(maxTokens) && (maxTokens as number) >= 1))
    return '"max_tokens" must be a whole number >= 1';
  if (typeof stream !== 'boolean') return '"stream" must be true or false';
  return { model, messages: messages as ChatMessage[], maxTokens: maxTokens as number | undefined, stream };
}

/**
 * The request a body asks for.
 *
 * @throws BadRequestException (400) for a body OpenAI's API would refuse
 * @throws NotFoundException (404) for a model other than `MODEL`, as OpenAI answers an unknown one
 */
export function chatRequest(body: unknown): ChatRequest {
  const request = readChatRequest(body);
  if (typeof request === 'string') throw new BadRequestException(request);
  if (request.model !== MODEL)
    throw new NotFoundException(`The model '${request.model}' does not exist (this sample serves '${MODEL}')`);
  return request;
}

/**
 * The tokens a request is expected to cost, from its body, before the handler runs: its prompt and
 * the longest answer it allows (`max_tokens`), or a typical answer when it sets none. A body the
 * handler refuses as malformed (a 400) reserves nothing.
 */
export function estimateTokens(body: unknown): number {
  const request = readChatRequest(body);
  return typeof request === 'string' ? 0 : promptTokens(request.messages) + (request.maxTokens ?? TYPICAL_ANSWER);
}

/** Tokens a completion used, as OpenAI reports them. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** `'length'`: the answer was cut short (by `max_tokens`, or here by the budget); `'stop'`: it was whole. */
export type FinishReason = 'stop' | 'length';

/** The answer to a request with `"stream": false`: OpenAI's `chat.completion` object. */
export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: 'assistant'; content: string };
    logprobs: null;
    finish_reason: FinishReason;
  }>;
  usage: Usage;
}

/** One server-sent event of a request with `"stream": true`: OpenAI's `chat.completion.chunk` object. */
export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: 'assistant'; content?: string };
    logprobs: null;
    finish_reason: FinishReason | null;
  }>;
  /** On the last chunk only (its `choices` empty), as with `stream_options: { include_usage: true }`. */
  usage?: Usage;
}

/** The usage of a prompt and an answer, tokens. */
export function usageOf(prompt: number, completion: number): Usage {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** One answer's identity, which each of its objects (the completion, or every chunk) repeats. */
export interface Answer {
  id: string;
  /** Unix seconds. */
  created: number;
  model: string;
}

/** A new answer of `model`. */
export function newAnswer(model: string): Answer {
  return { id: `chatcmpl-${randomUUID()}`, created: Math.floor(Date.now() / 1000), model };
}

/** What an object of `answer` opens with, in OpenAI's order. */
function opening<T extends string>({ id, created, model }: Answer, object: T) {
  return { id, object, created, model };
}

/** A whole answer. */
export function completion(answer: Answer, content: string, finishReason: FinishReason, usage: Usage): ChatCompletion {
  const message = { role: 'assistant' as const, content };
  const choice = { index: 0, message, logprobs: null, finish_reason: finishReason };
  return { ...opening(answer, 'chat.completion'), choices: [choice], usage };
}

/** One chunk of a streamed answer: a piece of it (`delta`), or its end (`finishReason`). */
export function chunk(
  answer: Answer,
  delta: ChatCompletionChunk['choices'][number]['delta'],
  finishReason: FinishReason | null = null,
): ChatCompletionChunk {
  const choice = { index: 0, delta, logprobs: null, finish_reason: finishReason };
  return { ...opening(answer, 'chat.completion.chunk'), choices: [choice] };
}

/** The last chunk of a streamed answer: no choice, the usage. */
export function usageChunk(answer: Answer, usage: Usage): ChatCompletionChunk {
  return { ...opening(answer, 'chat.completion.chunk'), choices: [], usage };
}

/** A server-sent event's frame (`data: …` and a blank line); `'[DONE]'` is the stream's last. */
export function sseFrame(data: ChatCompletionChunk | '[DONE]'): string {
  return `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
}
