export * from './rate-limit-headers.js';
