export * from './policy.types.js';
export * from './resolve-policy.js';
export * from './route-policies.js';
