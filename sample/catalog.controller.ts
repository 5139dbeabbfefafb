import { Controller, Get, NotFoundException, Param } from '@nestjs/common';
import { RateLimit } from 'nestjs-ratelimit';
import { PRODUCTS } from './products.js';

/** Public, anonymous routes: with no API key, clients are told apart by IP. */
@Controller('catalog')
export class CatalogController {
  /** 10 requests per second sustained, with room for a burst of 50 (a page load fanning out). */
  @Get()
  @RateLimit({ rps: 10, burst: 50 })
  list(): typeof PRODUCTS {
    return PRODUCTS;
  }

  /** No policy of its own: only the module's 'global' backstop applies. */
  @Get(':id')
  get(@Param('id') id: string): (typeof PRODUCTS)[number] {
    const product = PRODUCTS.find((candidate) => candidate.id === id);
    if (!product) throw new NotFoundException(`No product ${id}`);
    return product;
  }
}
