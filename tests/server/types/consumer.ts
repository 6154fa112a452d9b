// Type-checks a consumer of 'retry-fetch/server' (tsc --strict, run by `scripts/test.sh server`).
import { createClient } from 'redis';
import {
  idempotency,
  MemoryStore,
  RedisStore,
  toNodeHandler,
  type CompletedRecord,
  type FetchHandler,
  type IdempotencyOptions,
  type IdempotencyRecord,
  type IdempotencyStore,
  type LockRecord,
} from 'retry-fetch/server';

const handler: FetchHandler = async (request) => Response.json({ ok: true, method: request.method });

// The demo's exact use: idempotency(handler, { store }), MemoryStore, RedisStore({ client }), toNodeHandler.
const memory = idempotency(handler, { store: new MemoryStore() });
const client = createClient({ url: 'redis://127.0.0.1:6379' });
const redis = idempotency(handler, { store: new RedisStore({ client }) });
const listener = toNodeHandler(memory);
void redis;
void listener;

// Every option.
const options: IdempotencyOptions = {
  store: new RedisStore({ client, prefix: 'app:idem:' }),
  header: 'Idempotency-Key',
  required: (request) => request.method === 'POST',
  identity: (request) => request.headers.get('X-User-Id') ?? undefined,
  ttlMs: 86_400_000,
  lockTimeoutMs: 60_000,
  concurrent: 'reject',
  waitTimeoutMs: 10_000,
  pollMs: 25,
  onStoreError: (error, operation) => console.log(operation, error),
};
const wrapped: FetchHandler = idempotency(handler, options);
void wrapped;
idempotency(handler, { required: true, identity: async () => 'user-1' });
idempotency(handler);

// A store of one's own (here: a Map, as a SQL table would be used).
class MapStore implements IdempotencyStore {
  readonly rows = new Map<string, IdempotencyRecord>();
  acquire(key: string, lock: LockRecord): IdempotencyRecord | null {
    const row = this.rows.get(key);
    if (row) return row;
    this.rows.set(key, lock);
    return null;
  }
  async reclaim(key: string, staleToken: string, lock: LockRecord): Promise<boolean> {
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== staleToken) return false;
    this.rows.set(key, lock);
    return true;
  }
  complete(key: string, token: string, record: CompletedRecord): boolean {
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== token) return false;
    this.rows.set(key, record);
    return true;
  }
  release(key: string, token: string): boolean {
    const row = this.rows.get(key);
    return row?.state === 'in-progress' && row.token === token && this.rows.delete(key);
  }
}
idempotency(handler, { store: new MapStore() });

const store = new MemoryStore();
const size: number = store.size;
void size;
store.acquire('k', { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: Date.now() + 1000 }, 1000)
  .then((record) => {
    if (record?.state === 'completed') {
      const status: number = record.response.status;
      const body: string = record.response.body;
      void status;
      void body;
    }
  });

// @ts-expect-error concurrent is 'wait' or 'reject'
idempotency(handler, { concurrent: 'queue' });
// @ts-expect-error the client is required
new RedisStore({});
// @ts-expect-error a handler returns a Promise<Response>
idempotency(() => 'text');
