import type { CompletedRecord, HeldRecord, IdempotencyStore, LockRecord, RunRecord } from './store.js';

/** The part of a node-postgres query result that `PostgresStore` reads. */
export interface PgQueryResultLike {
  /** Rows inserted, updated, deleted or returned. */
  rowCount: number | null;
  /** The rows. */
  rows: any[];
  /** The command tag (`'COMMIT'`, `'ROLLBACK'`, ...). */
  command: string;
}

/**
 * The part of a node-postgres pool client (`await pool.connect()` from the `pg` package, v8)
 * that `PostgresStore` uses. With `@types/pg`, `PoolClient` is one.
 */
export interface PgPoolClientLike {
  /** Run a statement; `values` are `$1, $2, ...`. */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike | PgQueryResultLike[]>;
  /** Give the client back to its pool; with an error, the pool destroys it. */
  release(err?: Error | boolean): void;
  /** Listen to connection errors. */
  on(event: 'error', listener: (err: Error) => void): unknown;
  /** Stop listening. */
  off(event: 'error', listener: (err: Error) => void): unknown;
}

/**
 * The part of a node-postgres `Pool` (`new Pool()` from the `pg` package, v8) that
 * `PostgresStore` uses. With `@types/pg`, `Pool` is one. Give the pool an `'error'` listener
 * (`pool.on('error', ...)`): an idle client's connection that fails (a database restart, a
 * killed backend) is reported on the pool, and without a listener Node ends the process.
 */
export interface PgPoolLike<Client extends PgPoolClientLike = PgPoolClientLike> {
  /** Check a client out of the pool. */
  connect(): Promise<Client>;
  /** Run a statement on any client of the pool. */
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike | PgQueryResultLike[]>;
}

/** Options of `new PostgresStore(...)`. An unknown option name is a `TypeError` naming it. */
export interface PostgresStoreOptions<Client extends PgPoolClientLike = PgPoolClientLike> {
  /**
   * A node-postgres `Pool` you created (this package has no dependency on `pg`). Each request
   * being processed holds one of its clients while its handler runs: size the pool (`max`,
   * default 10) for the requests you process at once, plus what your handlers take from it.
   */
  pool: PgPoolLike<Client>;
  /**
   * The table: an SQL identifier, optionally schema-qualified (`'app.idempotency_keys'`):
   * letters, digits and `_`, not starting with a digit, at most 63 characters a part. It is
   * quoted, so its case is kept. Create it with `migrate()` or `PostgresStore.schema(table)`.
   * Its expiry index is `<table>_expires_at_idx`; for a name longer than 48 characters,
   * `<its first 39 characters>_<8 hex digits of the SHA-256 of table>_expires_at_idx`, so that
   * two long names with the same beginning get an index each.
   * @default 'idempotency_keys'
   */
  table?: string;
  /**
   * How long `acquire` waits for another transaction's hold on the key before it answers
   * `{ state: 'held' }` (a request in progress: `idempotency` waits for it
   * or answers 409), or `{ state: 'held', mismatch: true }` for a holder of another request
   * (a 422), in ms: an integer from 1 to 2147483647. Keep it short: the row of a key
   * in progress is locked for as long as its handler runs. @default 50
   */
  lockWaitMs?: number;
  /**
   * How long the run history (`recordRun`/`runs`, the table `<table>_runs`) keeps a run after it
   * started, in ms: an integer of 1 or more. Older runs are deleted by `recordRun`, at most once
   * a minute per store object (by the clock of the instance: a run's `startedAt` against its
   * `Date.now()`). @default 604800000 (7 days)
   */
  runRetentionMs?: number;
}

/**
 * An `IdempotencyStore` in PostgreSQL, shared by every server instance that uses the database,
 * in which the handler's own writes commit with the stored response or not at all.
 *
 * The row lock is the lock: `acquire` opens a transaction (READ COMMITTED) on a pool client
 * and inserts the key's row there, uncommitted; the transaction stays open while the handler
 * runs, which may write through it (`transaction()`, the handler's `ctx.tx`), and `complete`
 * stores the response in the row and commits it all; `release` rolls it all back. Only
 * completed responses are ever committed, so:
 *
 * - another request with the key waits for the uncommitted row at most `lockWaitMs`, then gets
 *   `{ state: 'held' }` (a `HeldRecord`), or `{ state: 'held', mismatch: true }` when the
 *   holder runs a request with another fingerprint (the companion's 422, as with the other
 *   stores). The fingerprint is compared through two transaction-level advisory locks that
 *   each claim takes, shared, before its `INSERT` (`pg_advisory_xact_lock_shared`: one of the
 *   key and the fingerprint, one of the key; 64-bit keys from a SHA-256 of the table, the key
 *   and the fingerprint), and that the told-held request tries (`pg_try_advisory_xact_lock`):
 *   the key's taken while the fingerprint's is free is another request's. A holder that
 *   takes no such locks (an older version of this store) is waited for, never a 422;
 * - a holder that dies (crash, lost connection, `pg_terminate_backend`) frees the key at once:
 *   PostgreSQL rolls its transaction back;
 * - a holder idle in its transaction for `lockTimeoutMs` (no statement: hung) loses the
 *   transaction (`idle_in_transaction_session_timeout`), and the key; `renew` keeps a live
 *   one's;
 * - `reclaim` is always `false` (an in-progress row is never visible, so never stale).
 *
 * A statement through `ctx.tx` that fails aborts the whole transaction (use a `SAVEPOINT` to
 * recover from one): `complete` then throws, nothing is stored, the writes are rolled back.
 *
 * `ctx.tx` is guarded:
 *
 * - statements that would end or nest its transaction throw a `TypeError`: `BEGIN`,
 *   `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK` (but `ROLLBACK TO [SAVEPOINT]`), `ABORT`,
 *   `PREPARE TRANSACTION`, `COMMIT PREPARED`, `ROLLBACK PREPARED`, in any statement of the text
 *   (`query(text)`, `query({ text })`, a submittable with a `text`), found by an SQL lexer that
 *   skips comments (nested ones too), strings (`'...'`, `E'...'`, `$tag$...$tag$`) and quoted
 *   identifiers; and so does `release()`. `SAVEPOINT` and `ROLLBACK TO SAVEPOINT` work. A
 *   `CREATE FUNCTION ... BEGIN ATOMIC ... END` is refused too (run it outside `ctx.tx`).
 * - once its handler has settled (`closeTransaction()`, or else `complete()` / `release()`),
 *   every use of it throws a `TypeError` ("ctx.tx was used after its handler settled"): a
 *   statement left running late would otherwise go into the transaction being committed, or
 *   into another request's once the client is back in the pool.
 * - what still gets past the guard (a `COMMIT` sent on its raw connection) is detected by
 *   `complete`, which stores the answer only in the transaction `acquire` opened (it compares
 *   `txid_current()`). If that transaction was committed through `ctx.tx`, the handler's writes
 *   before it are committed and the key's row with them, without an answer: `complete` stores
 *   the answer into that row after the fact (outside a transaction, not atomically: a crash in
 *   between leaves the key held until `lockTimeoutMs`, then it runs again), prints the mistake
 *   with `console.error` (`retry-fetch/server: PostgresStore: ...`) and resolves `true`, so a
 *   retry replays the answer rather than run the effects again. If it was rolled back, the row
 *   is gone and nothing can be stored: `complete` rejects (the companion answers 503). Either
 *   way that pool client is destroyed, not reused.
 *
 * Expired rows are deleted by `acquire` at most once a minute (in the background) and by
 * `cleanup()`. The store's secret (`secret()`) is a row of the table that never expires: scope
 * `''`, key `'secret'`, the secret in `fingerprint`.
 *
 * The run history is a table of its own, `<table>_runs` (`runsTable`; created by `migrate()`,
 * `PostgresStore.runsSchema(table)`): a row per run id, written and read on the pool (never in a
 * key's transaction, so a run is recorded even when its writes roll back). It keeps every run
 * for `runRetentionMs` (default 7 days) after it started: older rows are deleted by `recordRun`,
 * at most once a minute per store object, in the background.
 *
 * @example
 * ```js
 * import pg from 'pg';
 * import { idempotency, PostgresStore } from 'retry-fetch/server';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
 * // An idle client whose connection fails (a database restart) is reported on the pool:
 * // without a listener, that 'error' event ends the process. The pool drops the client.
 * pool.on('error', (error) => console.error('postgres:', error));
 * const store = new PostgresStore({ pool });
 * await store.migrate();
 * const handler = idempotency(async (request, ctx) => {
 *   await ctx.tx.query('INSERT INTO payments (amount) VALUES ($1)', [42]);
 *   return Response.json({ ok: true }, { status: 201 });
 * }, { store });
 * ```
 *
 * `Client` is the pool's client type (`new PostgresStore<PoolClient>({ pool })` with
 * `@types/pg`), what `transaction()` returns.
 * @throws TypeError when `pool` is not a pg Pool, `table` not an SQL table name, `lockWaitMs`
 *   not an integer from 1 to 2147483647, `runRetentionMs` not an integer of 1 or more, or an
 *   option name is unknown.
 */
export class PostgresStore<Client extends PgPoolClientLike = PgPoolClientLike> implements IdempotencyStore<Client> {
  constructor(options: PostgresStoreOptions<Client>);
  /**
   * The SQL that creates the table (`CREATE TABLE IF NOT EXISTS`: `scope`, `key`,
   * `fingerprint`, `response jsonb`, `completed_at`, `expires_at`, primary key `(scope, key)`)
   * and its index on `expires_at`, as `migrate()` runs it: for a migration tool of your own.
   * @throws TypeError when `table` is not an SQL table name.
   */
  static schema(table?: string): string;
  /**
   * The SQL that creates the run history's table (`CREATE TABLE IF NOT EXISTS <table>_runs`:
   * `id text PRIMARY KEY`, `key`, `scope`, `instance`, `started_at double precision` (ms since
   * the Unix epoch), `ended_at`, `outcome`, `detail`) and its indexes on `(key, started_at)` and
   * `(started_at)`, as `migrate()` runs it after `schema(table)`: for a migration tool of your
   * own. A table name too long for `_runs` (or an index name too long) is shortened as the
   * expiry index's is (see the `table` option).
   * @throws TypeError when `table` is not an SQL table name.
   */
  static runsSchema(table?: string): string;
  /** The table name. @default 'idempotency_keys' */
  readonly table: string;
  /** The run history's table (schema-qualified when `table` is). @default 'idempotency_keys_runs' */
  readonly runsTable: string;
  /** How long a run is kept after it started, in ms. @default 604800000 */
  readonly runRetentionMs: number;
  /** Always `true`: `release` rolls back what was written through `transaction()`. */
  readonly transactional: true;
  /**
   * Create the table, the run history's table and their indexes when they are missing
   * (`PostgresStore.schema(table)`, then `PostgresStore.runsSchema(table)`): a database made
   * before the run history gets its table at the next `migrate()`. Safe to run at every start,
   * from several processes at once (they take turns, on an advisory lock).
   */
  migrate(): Promise<void>;
  /** Delete the expired rows now; resolves with how many were deleted. */
  cleanup(): Promise<number>;
  /**
   * `BEGIN`, the claim's two advisory locks, then `INSERT ... ON CONFLICT DO NOTHING` of the
   * key's row (an expired one is taken over with an `UPDATE`), waiting at most `lockWaitMs`
   * for another transaction's hold: `null` when this transaction now holds the key; the
   * `CompletedRecord` of a live response; a `HeldRecord` when another live transaction holds
   * the key (`mismatch: true` when it holds it for another fingerprint, see the class).
   */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number, options?: { signal?: AbortSignal }): Promise<CompletedRecord | HeldRecord | null>;
  /** Run a statement in the holder's transaction (its idle timer starts again, at `lockTimeoutMs`); `false` when it is gone or `token` does not hold `key`. */
  renew(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** Always `false`: an in-progress row is never visible to another transaction, so never stale. */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<false>;
  /**
   * Store the response in the key's row (live for `ttlMs`) and `COMMIT`, with the handler's
   * writes; `false` when `token` does not hold `key` or its transaction was lost. Rejects when
   * the transaction was aborted by a failed statement, or the `COMMIT` failed, or the
   * transaction was rolled back through `ctx.tx`; one committed through `ctx.tx` gets its
   * answer after the fact (`true`, and a `console.error`: see the class). Closes `ctx.tx`.
   */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /**
   * `ROLLBACK`: the key is free and the handler's writes through `transaction()` are undone;
   * `false` when `token` does not hold `key`. Closes `ctx.tx`.
   */
  release(key: string, token: string): Promise<boolean>;
  /**
   * See `IdempotencyStore.recordRun`: `INSERT ... ON CONFLICT (id) DO UPDATE` of every column,
   * on `pool.query` (never a key's transaction). Then, at most once a minute per store object,
   * deletes the runs that started more than `runRetentionMs` ago, in the background. A NUL
   * character in `detail` is stored as U+FFFD (PostgreSQL's text cannot hold one). Rejects with
   * a `TypeError` when `run` is not a `RunRecord`.
   */
  recordRun(run: RunRecord): Promise<void>;
  /**
   * See `IdempotencyStore.runs`: the rows of `key` (every scope), at most 1000: the newest (the
   * latest `startedAt`, then `id`), returned oldest `startedAt` first, then by `id` (ids
   * compared as `COLLATE "C"`, code point order), as the other stores return them; on
   * `pool.query`. The start of a run counts the same 1000 (a job's `maxRuns`).
   */
  runs(key: string): Promise<RunRecord[]>;
  /**
   * The pool client inside the transaction that holds `key` for `token` (the handler's
   * `ctx.tx`), guarded (see the class), or `undefined`.
   */
  transaction(key: string, token: string): Client | undefined;
  /**
   * The handler of `key` has settled: from now on every use of what `transaction()` returned
   * throws a `TypeError` (reading a symbol-keyed property, `then` or `constructor` still works,
   * for logging and awaiting it). Nothing else happens: `complete` or `release` follows.
   */
  closeTransaction(key: string, token: string): void;
  /**
   * See `IdempotencyStore.secret`: 64 hex digits in a row of the table (scope `''`, key
   * `'secret'`, `expires_at` `'infinity'`), the same for every instance on the table. The first
   * call creates it if missing (`INSERT ... ON CONFLICT DO NOTHING` of a random one) and reads
   * it, on `pool.query`; the value is cached in the instance once read (a failure is not).
   * Do not delete the row: a new secret gives every caller a new scope, so a retry of a request
   * made before would run it again.
   */
  secret(): Promise<string>;
}
