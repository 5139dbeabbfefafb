import type { ExecutionContext } from '@nestjs/common';
import { Args, Field, Float, GqlExecutionContext, ID, Int, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { RateLimit } from 'nestjs-ratelimit';
import { PRODUCTS } from './products.js';

@ObjectType()
class Product {
  @Field(() => ID)
  id!: string;

  @Field()
  name!: string;

  @Field(() => Float)
  price!: number;
}

/**
 * Query complexity in small: a `products` query costs one token per product it asks for, so a
 * client paging 100 at a time spends its budget 100 times as fast as one asking for 1. graphql-js
 * has applied `first`'s default before the guard runs.
 */
function pageSize(context: ExecutionContext): number {
  return GqlExecutionContext.create(context).getArgs<{ first: number }>().first;
}

/**
 * The catalog over GraphQL (POST /graphql), anonymous like the REST one: clients are told apart by
 * API key, else by IP. The class's policy covers both root fields and is charged once per
 * operation, however many of them (or aliases of them) a query selects; `products`' own policy is
 * charged once per selection, so each alias pays for its own page. A refused field is an error
 * with `extensions: { code: 'RATE_LIMITED', policy, retryAfter }`; the rate-limit headers and
 * `Retry-After` are on the HTTP response, written from every field's decision.
 */
@Resolver(() => Product)
@RateLimit({ rps: 10, burst: 50 })
export class CatalogResolver {
  /** Up to 100 products' worth of tokens, refilling 20 a second, paid by each alias; asking for more than 100 is never admitted. */
  @Query(() => [Product])
  @RateLimit({ rps: 20, burst: 100, cost: pageSize })
  products(@Args('first', { type: () => Int, defaultValue: 10 }) first: number): Product[] {
    return PRODUCTS.slice(0, first);
  }

  /** No policy of its own: the class's and the module's apply. */
  @Query(() => Product, { nullable: true })
  product(@Args('id', { type: () => ID }) id: string): Product | undefined {
    return PRODUCTS.find((candidate) => candidate.id === id);
  }
}
