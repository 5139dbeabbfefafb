export * from './algorithm.types.js';
export * from './conversions.js';
export * from './decide.js';
export * from './token-bucket.js';
