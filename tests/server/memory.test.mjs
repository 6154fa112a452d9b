// The idempotency scenarios with MemoryStore (one server process).
import { MemoryStore } from 'retry-fetch/server';
import { storeScenarios } from './scenarios.mjs';

storeScenarios('MemoryStore', () => new MemoryStore());
