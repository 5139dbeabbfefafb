export * from './memory/memory.store.js';
export * from './rate-limit-store.interface.js';
export * from './redis/redis.store.js';
export * from './rate-limit-store.error.js';
