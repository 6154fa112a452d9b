// Type-checks a consumer of 'retry-fetch/server' (tsc --strict, run by `scripts/test.sh server`).
import { createClient } from 'redis';
import {
  idempotency,
  idempotent,
  MemoryStore,
  PostgresStore,
  RedisStore,
  toNodeHandler,
  type CompletedRecord,
  type DeadLetter,
  type RunEvent,
  type RunRecord,
  type FetchHandler,
  type HeldRecord,
  type IdempotencyContext,
  type IdempotencyError,
  type IdempotencyOptions,
  type IdempotencyRecord,
  type IdempotencyStore,
  type IdempotentHandler,
  type IdempotentOptions,
  type LockRecord,
  type PgPoolClientLike,
  type PgPoolLike,
} from 'retry-fetch/server';

// A plain fetch handler (no ctx) is still a valid handler.
const handler: FetchHandler = async (request) => Response.json({ ok: true, method: request.method });

// The demo's exact use: idempotency(handler, { store }), MemoryStore, RedisStore({ client }), toNodeHandler.
const memory = idempotency(handler, { store: new MemoryStore() });
const client = createClient({ url: 'redis://127.0.0.1:6379' });
const redis = idempotency(handler, { store: new RedisStore({ client }) });
const listener = toNodeHandler(memory);
void redis;
void listener;

// The handler's context: key, keyFor(name), tx.
const withCtx: IdempotentHandler = async (request, ctx) => {
  const key: string | null = ctx.key;
  const downstream: string = ctx.keyFor('charge');
  const tx: unknown = ctx.tx;
  void tx;
  return Response.json({ key, downstream, url: request.url }, { status: 201 });
};
const served: FetchHandler = idempotency(withCtx);
void served;
// A synchronous handler is fine too.
idempotency((request, ctx) => new Response(`${request.method} ${ctx.key ?? '-'}`));

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
  maxBodyBytes: 1_048_576,
  secret: 'a-secret-every-instance-shares',
  handlerTimeoutMs: 30_000,
  ignoredMethods: ['GET', 'HEAD', 'OPTIONS'],
  acceptAfterMs: 2_000,
  history: true,
  onEvent: (event: RunEvent) => {
    const type: 'run-started' | 'run-ended' | 'replayed' | 'holder-crashed' | 'accepted' | 'dead-lettered' = event.type;
    const run: RunRecord = event.run;
    const outcome: string | null = run.outcome;
    console.log(type, run.key, run.scope, run.instance, run.startedAt, run.endedAt, outcome);
  },
  onStoreError: (error, operation) => {
    const op: 'secret' | 'acquire' | 'reclaim' | 'renew' | 'complete' | 'release' | 'recordRun' | 'runs' = operation;
    console.log(op, error);
  },
  onError: (error) => console.log(error),
};
const wrapped: FetchHandler = idempotency(handler, options);
void wrapped;
idempotency(handler, { required: true, identity: async () => 'user-1' });
idempotency(handler, { identity: false });
idempotency(handler, { identity: (request) => request.headers.get('X-User-Id') });
idempotency(handler);
// A Next.js route handler: the route's second argument reaches ctx; ctx.signal is the handler's.
const POST = idempotency<unknown, { params: Promise<{ id: string }> }>(async (request, ctx) => {
  const { id } = await ctx.params;
  return Response.json({ id, key: ctx.key, aborted: ctx.signal?.aborted ?? false });
});
const routed: Promise<Response> = POST(new Request('http://x/pay/7', { method: 'POST' }), { params: Promise.resolve({ id: '7' }) });
void routed;

// PostgresStore: ctx.tx is the pool's client type.
declare const pool: PgPoolLike;
const pgStore = new PostgresStore({ pool, table: 'app.idempotency_keys', lockWaitMs: 50 });
const transactional: true = pgStore.transactional;
const table: string = pgStore.table;
const schema: string = PostgresStore.schema('idempotency_keys');
void transactional;
void table;
void schema;
async function setup(): Promise<void> {
  await pgStore.migrate();
  const deleted: number = await pgStore.cleanup();
  void deleted;
}
void setup;
const charge = idempotency(async (request, ctx) => {
  const tx: PgPoolClientLike | undefined = ctx.tx;
  const { amount } = (await request.json()) as { amount: number };
  const result = await ctx.tx?.query('INSERT INTO charges (amount) VALUES ($1) RETURNING id', [amount]);
  void result;
  void tx;
  return Response.json({ charged: amount }, { status: 201 });
}, { store: pgStore });
void charge;

// A pool whose clients have more than the store needs: ctx.tx keeps the richer type.
interface AppClient extends PgPoolClientLike {
  copyFrom(table: string): Promise<void>;
}
declare const appPool: PgPoolLike<AppClient>;
const appStore = new PostgresStore<AppClient>({ pool: appPool });
idempotency(async (_request, ctx: IdempotencyContext<AppClient>) => {
  await ctx.tx?.copyFrom('imports');
  return new Response(null, { status: 204 });
}, { store: appStore });
const appTx: AppClient | undefined = appStore.transaction('-:k', 'token');
void appTx;

// idempotent(fn, options): the result type comes from fn, the input type from fn or key.
interface Message {
  id: string;
  orderId: string;
}
const ship = idempotent(async (message: Message, ctx) => {
  const key: string | null = ctx.key;
  return { shipped: message.orderId, carrierKey: ctx.keyFor('carrier'), key };
}, { key: (message) => message.id, scope: 'shipments', store: new MemoryStore() });
const shipped: Promise<{ shipped: string; carrierKey: string; key: string | null }> = ship({ id: 'm-1', orderId: 'o-1' });
void shipped;
const jobOptions: IdempotentOptions<Message> = {
  key: async (message) => message.id,
  scope: 'tenant-1',
  store: new MemoryStore(),
  ttlMs: 60_000,
  lockTimeoutMs: 30_000,
  concurrent: 'reject',
  waitTimeoutMs: 0,
  pollMs: 10,
  onStoreError: (error, operation) => console.log(operation, error),
  maxRuns: 5,
  onDeadLetter: async (record: DeadLetter<Message>) => {
    const input: Message = record.input;
    const runs: RunRecord[] = record.runs;
    console.log(record.key, record.scope, record.failedRuns, record.maxRuns, input.id, runs.length);
  },
  history: true,
  onEvent: (event) => console.log(event.type),
};
// README's dead-letter hook: one that resolves to a value (a stream entry's id) is fine.
const toDeadLetterStream = async (record: DeadLetter<Message>): Promise<string> => `${record.key}-0`;
const deadLettered = idempotent(async (message: Message) => message.id, { ...jobOptions, onDeadLetter: toDeadLetterStream });
void deadLettered;
const count = idempotent((message: Message) => message.orderId.length, jobOptions);
const counted: Promise<number> = count({ id: 'm-2', orderId: 'o-2' });
void counted;
const insert = idempotent(async (message: Message, ctx) => {
  const tx: PgPoolClientLike | undefined = ctx.tx;
  await tx?.query('INSERT INTO shipments (order_id) VALUES ($1)', [message.orderId]);
}, { key: (message) => message.id, store: pgStore });
const inserted: Promise<void> = insert({ id: 'm-3', orderId: 'o-3' });
void inserted;
async function consume(message: Message): Promise<void> {
  try {
    await ship(message);
  } catch (e) {
    const error = e as IdempotencyError;
    const code: 'key-reused' | 'in-progress' | 'previous-run-failed' | 'not-committed' | 'not-storable' = error.code;
    const name: 'IdempotencyError' = error.name;
    const message2: string = error.message;
    void code;
    void name;
    void message2;
  }
}
void consume;

// A store of one's own (here: a Map, as a SQL table would be used); renew is optional.
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
idempotent(async () => 1, { key: () => 'k', store: new MapStore() });

// A store with renew and a transaction of its own.
class TxStore extends MapStore implements IdempotencyStore<{ commitHook(): void }> {
  readonly transactional = true;
  renew(key: string, token: string, lock: LockRecord): boolean {
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== token) return false;
    this.rows.set(key, lock);
    return true;
  }
  transaction(): { commitHook(): void } {
    return { commitHook() {} };
  }
}
idempotency(async (_request, ctx) => {
  ctx.tx?.commitHook();
  return new Response('ok');
}, { store: new TxStore() });

const held: HeldRecord = { state: 'held' };
const records: IdempotencyRecord[] = [held, { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: 0 }];
for (const record of records) {
  if (record.state === 'in-progress') {
    const token: string = record.token;
    void token;
  }
}

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
// @ts-expect-error identity is a function or false
idempotency(handler, { identity: true });
// @ts-expect-error unknown options are refused at runtime, and by the types
idempotency(handler, { lockTimeout: 1000 });
// @ts-expect-error the client is required
new RedisStore({});
// @ts-expect-error the pool is required
new PostgresStore({ table: 't' });
// @ts-expect-error a handler returns a Response
idempotency(() => 'text');
// @ts-expect-error keyFor takes a name
idempotency(async (_request, ctx) => new Response(ctx.keyFor(1)));
// @ts-expect-error ctx.key may be null
idempotency(async (_request, ctx) => new Response(ctx.key.toUpperCase()));
// @ts-expect-error idempotent needs a key
idempotent(async () => 1, { store: new MemoryStore() });
// @ts-expect-error the key is a string
idempotent(async (n: number) => n, { key: (n) => n });
// @ts-expect-error onError is an option of idempotency only
idempotent(async () => 1, { key: () => 'k', onError: () => {} });

// The run history: store.runs(key) on every store.
async function history(store: MemoryStore | RedisStore | PostgresStore): Promise<RunRecord[]> {
  return store.runs('key');
}
void history;
// @ts-expect-error acceptAfterMs is a number of ms
idempotency(async () => new Response(''), { acceptAfterMs: '2s' });
// @ts-expect-error maxRuns is an option of idempotent only
idempotency(async () => new Response(''), { maxRuns: 3 });
// An option given as undefined is not given (also under exactOptionalPropertyTypes), and
// ignoredMethods takes a read-only list.
declare const maybeStore: MemoryStore | undefined;
idempotency(handler, { store: maybeStore, ttlMs: undefined, onError: undefined });
idempotent(async () => 1, { key: () => 'k', store: maybeStore, scope: undefined, secret: undefined });
idempotency(handler, { ignoredMethods: ['GET', 'HEAD', 'OPTIONS'] as const });
