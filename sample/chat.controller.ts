import { Readable } from 'node:stream';
import { Body, Controller, type ExecutionContext, HttpCode, Post, StreamableFile } from '@nestjs/common';
import { type LimitedRequest, RateLimit, RateLimitMeter, type RateLimitPolicy } from 'nestjs-ratelimit';
import {
  type ChatCompletion,
  type ChatRequest,
  chatRequest,
  chunk,
  completion,
  estimateTokens,
  newAnswer,
  sseFrame,
  usageChunk,
  usageOf,
} from './chat-completions.js';
import { FakeModel, promptTokens } from './fake-model.js';

/** The caller's API key: the x-api-key header, else the token of `Authorization: Bearer <key>`, as OpenAI's SDKs send it. */
function apiKeyOf(context: ExecutionContext): string | undefined {
  const { headers } = context.switchToHttp().getRequest<LimitedRequest>();
  const key = headers['x-api-key'] ?? /^Bearer\s+(\S+)$/i.exec(String(headers.authorization ?? ''))?.[1];
  return typeof key === 'string' ? key : undefined;
}

/** 20 requests a minute per API key. */
export const REQUESTS_PER_MINUTE: RateLimitPolicy = { name: 'rpm', limit: 20, window: '1m', key: apiKeyOf };

/**
 * 10,000 tokens a minute per API key. A request reserves its estimate when it is admitted (its
 * prompt and its `max_tokens`), and is charged what it really used when it ends: a JSON answer
 * what its `usage` says, a stream what the handler counted on its meter. What it used beyond the
 * estimate is debt, paid back by waiting; what it did not use is given back.
 */
export const TOKENS_PER_MINUTE: RateLimitPolicy = {
  name: 'tpm',
  limit: 10_000,
  window: '1m',
  key: apiKeyOf,
  unit: 'tokens',
  cost: (_context, request) => estimateTokens(request.body),
  settle: (result: ChatCompletion) => result.usage.total_tokens,
};

/**
 * OpenAI's chat completions endpoint, on a fake model (see `FakeModel`): point an OpenAI SDK at
 * http://localhost:3000/v1 and it reads the answers, and the x-ratelimit-*-requests and -tokens
 * headers, as it reads OpenAI's. With `"stream": true` the answer comes as server-sent events,
 * each token counted on the request's meter, until it is whole, the budget is spent (the meter's
 * signal) or the client goes away; the request is charged what was produced, however it ends.
 */
@Controller('v1')
export class ChatController {
  constructor(private readonly model: FakeModel) {}

  @Post('chat/completions')
  @HttpCode(200)
  @RateLimit([REQUESTS_PER_MINUTE, TOKENS_PER_MINUTE])
  complete(@Body() body: unknown, @RateLimitMeter('tpm') meter: RateLimitMeter): ChatCompletion | StreamableFile {
    let request: ChatRequest;
    try {
      request = chatRequest(body);
    } catch (error) {
      // a request the model never saw (400, 404) used nothing: its whole reservation goes back
      meter.set(0);
      throw error;
    }
    if (request.stream) {
      // counted at once: the prompt is paid for even when the client leaves before the first token
      const prompt = promptTokens(request.messages);
      meter.add(prompt);
      return new StreamableFile(Readable.from(this.events(request, prompt, meter)), { type: 'text/event-stream' });
    }
    const whole = this.model.answer(request.messages);
    const tokens = whole.slice(0, request.maxTokens);
    const usage = usageOf(promptTokens(request.messages), tokens.length);
    return completion(
      newAnswer(request.model),
      tokens.join(''),
      tokens.length < whole.length ? 'length' : 'stop',
      usage,
    );
  }

  /**
   * The answer's server-sent events: a first chunk with the role, a chunk per token, the end, the
   * usage, `[DONE]`. Each token is counted before it is sent; the stream stops early when the
   * meter's signal aborts, and when the client goes away (Nest then destroys the stream, which
   * ends this generator at its next token).
   */
  private async *events(request: ChatRequest, prompt: number, meter: RateLimitMeter): AsyncGenerator<string> {
    const answer = newAnswer(request.model);
    yield sseFrame(chunk(answer, { role: 'assistant', content: '' }));
    let produced = 0;
    for await (const token of this.model.stream(request.messages, request.maxTokens, meter.signal)) {
      meter.add(1);
      produced++;
      yield sseFrame(chunk(answer, { content: token }));
    }
    const whole = produced === this.model.answer(request.messages).length;
    yield sseFrame(chunk(answer, {}, whole ? 'stop' : 'length'));
    yield sseFrame(usageChunk(answer, usageOf(prompt, produced)));
    yield sseFrame('[DONE]');
  }
}
