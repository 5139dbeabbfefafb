export { RefusalGate, type ServerAnswer } from './refusal-gate.js';
