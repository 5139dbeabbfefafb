export * from './bucket-key.js';
export * from './identity.js';
export * from './ip.js';
