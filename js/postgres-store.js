// PostgresStore: the idempotency store of `retry-fetch/server` in PostgreSQL, through a
// node-postgres (`pg`) Pool the caller creates (re-exported by server.js; this package does not
// depend on `pg`). The store protocol and every default: store.d.ts and postgres-store.d.ts.
//
// The design: the row lock IS the lock. acquire() opens a transaction on a client of its own and
// inserts the key's row there, uncommitted; that transaction stays open while the handler runs
// (the handler may write through it: transaction() hands the client out as `ctx.tx`), and
// complete() fills the row with the response and commits it together with the handler's
// writes. So only completed rows are ever committed:
//   - another request with the key runs into the uncommitted row: its INSERT waits for the
//     holder's transaction, at most lockWaitMs (lock_timeout), then reports 55P03, which is
//     `{ state: 'held' }` (a live holder; its details are not visible);
//   - a holder that dies (crash, lost connection) loses its connection, PostgreSQL rolls its
//     transaction back and the row vanishes: the key is free at once, no lock expiry to wait;
//   - a holder that hangs with its transaction open loses it after lockTimeoutMs without a
//     statement (idle_in_transaction_session_timeout); renew() runs one to keep a live one.
// reclaim() has nothing to do: an in-progress record is never visible, so never stale.
import { describe, optionError, checkOptionNames } from './store-support.js';

const OPTIONS = ['pool', 'table', 'lockWaitMs'];

/** `name` or `schema.name`, each part a plain SQL identifier (quoted as is, case kept). */
const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/;
const TABLE_EXPECTED =
  'an SQL table name: letters, digits and _, not starting with a digit, at most 63 characters, optionally schema-qualified ("schema.table")';
/** PostgreSQL cuts longer identifiers to this many bytes (NAMEDATALEN - 1). */
const MAX_IDENTIFIER = 63;
/** The longest time PostgreSQL's ms settings (lock_timeout, idle_in_transaction_session_timeout) take. */
const MAX_SETTING_MS = 2147483647;
const LOCK_WAIT_EXPECTED = `an integer number of milliseconds from 1 to ${MAX_SETTING_MS}`;
/** Expired rows are deleted at most this often by acquire() (cleanup() does it on demand). */
const CLEANUP_INTERVAL_MS = 60_000;
/** SQLSTATE lock_not_available: lock_timeout ran out (another live transaction holds the key). */
const LOCK_NOT_AVAILABLE = '55P03';
/** SQLSTATE in_failed_sql_transaction: a statement of the transaction failed before. */
const IN_FAILED_TRANSACTION = '25P02';
/** The advisory lock key on which migrate() calls (of any table, any process) take turns: arbitrary, an int8. */
const MIGRATE_LOCK = 7_265_846_100_211_845;

/** What acquire() returns for a key held by another live transaction. */
const HELD = Object.freeze({ state: 'held' });

function checkTable(where, table) {
  const ok = typeof table === 'string' && TABLE_NAME.test(table) && table.split('.').every((p) => p.length <= MAX_IDENTIFIER);
  if (!ok) throw optionError(where, 'table', table, TABLE_EXPECTED);
  return table;
}

/** `"schema"."table"`: quoted, so a name that is a keyword works and its case is kept. */
function quoteTable(table) {
  return table
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/** The expiry index's name: the table's name (without schema) + `_expires_at_idx`, at most 63 characters. */
function indexName(table) {
  const base = table.split('.').pop();
  return `"${base.slice(0, MAX_IDENTIFIER - '_expires_at_idx'.length)}_expires_at_idx"`;
}

function schemaSql(table) {
  const t = quoteTable(table);
  return `CREATE TABLE IF NOT EXISTS ${t} (
  scope text NOT NULL,
  key text NOT NULL,
  fingerprint text NOT NULL,
  response jsonb NOT NULL,
  completed_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS ${indexName(table)} ON ${t} (expires_at);
`;
}

/** `<scope>:<idempotency key>` split at the first `:` (the scope never contains one). */
function splitKey(key) {
  const i = typeof key === 'string' ? key.indexOf(':') : -1;
  if (i < 0) throw new TypeError(`PostgresStore: the key must be "<scope>:<idempotency key>"; got ${describe(key)}`);
  return [key.slice(0, i), key.slice(i + 1)];
}

/**
 * A duration for a PostgreSQL setting: whole ms from 1 to 2^31 - 1 (0 would mean "no limit").
 * Checked because it is written into the SQL text (SET takes no parameters).
 */
function settingMs(name, ms) {
  if (typeof ms !== 'number' || !(ms > 0)) {
    throw new TypeError(`PostgresStore: ${name} must be a number of milliseconds above 0; got ${describe(ms)}`);
  }
  return Math.min(Math.ceil(ms), MAX_SETTING_MS);
}

/**
 * An IdempotencyStore in PostgreSQL, shared by every server instance that uses the database;
 * the handler's own writes through `ctx.tx` commit with the stored response or not at all.
 * See the comment at the top of this file for the design.
 */
/**
 * The record for a committed row: its stored answer, or `HELD` for a row with no answer (one
 * committed in progress, which counts as held until it expires, then is taken over). A
 * `response` column read as text (a custom jsonb parser) is parsed here.
 */
function completedOrHeld(row) {
  const response = typeof row.response === 'string' ? JSON.parse(row.response) : row.response;
  if (response === null || response === undefined) return { ...HELD };
  return {
    state: 'completed',
    fingerprint: row.fingerprint,
    response,
    completedAt: Math.round(Number(row.completed_ms)),
  };
}

/** Statements that end, or nest, the key's transaction: refused through `ctx.tx`. */
const TRANSACTION_CONTROL = /^\s*(?:BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK(?!\s+TO\b)|ABORT|PREPARE\s+TRANSACTION|COMMIT\s+PREPARED|ROLLBACK\s+PREPARED)\b/i;

/**
 * `ctx.tx`: the held client, guarded. Its transaction is the key's lock: a `COMMIT` or
 * `ROLLBACK` through it (or a nested `BEGIN`, which pg would only warn about) would commit the
 * in-progress key or free it while the handler runs, and a duplicate could run; `release()`
 * would hand the connection to someone else. Those throw a TypeError; `SAVEPOINT` and
 * `ROLLBACK TO SAVEPOINT` work.
 */
function guardTransaction(client) {
  const refuse = (what) => {
    throw new TypeError(`PostgresStore: ctx.tx is the transaction that holds the idempotency key: ${what} is not allowed through it (it commits with the stored answer; use SAVEPOINT / ROLLBACK TO SAVEPOINT inside it)`);
  };
  return new Proxy(client, {
    get(target, prop) {
      if (prop === 'release') return () => refuse('release()');
      const value = Reflect.get(target, prop, target);
      if (prop === 'query' && typeof value === 'function') {
        return (config, ...rest) => {
          const text = typeof config === 'string' ? config : config?.text;
          const statement = typeof text === 'string' ? text.split(';').find((part) => TRANSACTION_CONTROL.test(part)) : undefined;
          if (statement !== undefined) refuse(JSON.stringify(statement.trim().split(/\s+/, 2).join(' ')));
          return value.call(target, config, ...rest);
        };
      }
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

export class PostgresStore {
  #pool;
  #table;
  #sql;
  #lockWaitMs;
  #held = new Map(); // token -> { key, client, lost, returned, onError }: the open transactions of this store
  #lastCleanup = 0;

  constructor(options) {
    if (typeof options !== 'object' || options === null) {
      throw optionError('PostgresStore', 'options', options, 'an object { pool, table?, lockWaitMs? }');
    }
    checkOptionNames('PostgresStore', options, OPTIONS);
    const { pool, table = 'idempotency_keys', lockWaitMs = 50 } = options;
    const isPool =
      typeof pool === 'object' && pool !== null && typeof pool.connect === 'function' && typeof pool.query === 'function';
    if (!isPool) {
      throw optionError('PostgresStore', 'pool', pool, "a node-postgres Pool (new Pool() from the 'pg' package)");
    }
    checkTable('PostgresStore', table);
    if (!Number.isInteger(lockWaitMs) || lockWaitMs < 1 || lockWaitMs > MAX_SETTING_MS) {
      throw optionError('PostgresStore', 'lockWaitMs', lockWaitMs, LOCK_WAIT_EXPECTED);
    }
    this.#pool = pool;
    this.#table = table;
    this.#lockWaitMs = lockWaitMs;
    const t = quoteTable(table);
    this.#sql = {
      insert: `INSERT INTO ${t} (scope, key, fingerprint, response, completed_at, expires_at)
        VALUES ($1, $2, $3, 'null'::jsonb, now(), now() + $4::double precision * interval '1 millisecond')
        ON CONFLICT (scope, key) DO NOTHING RETURNING 1`,
      // completed_at as ms since the epoch: a float8 is a JS number whatever type parsers the
      // application set for timestamptz.
      select: `SELECT fingerprint, response, (extract(epoch FROM completed_at) * 1000)::double precision AS completed_ms,
        expires_at > now() AS live FROM ${t} WHERE scope = $1 AND key = $2`,
      takeOver: `UPDATE ${t} SET fingerprint = $3, response = 'null'::jsonb, completed_at = now(),
        expires_at = now() + $4::double precision * interval '1 millisecond'
        WHERE scope = $1 AND key = $2 AND expires_at <= now() RETURNING 1`,
      // clock_timestamp(), not now(): now() is when the transaction (the handler) began.
      complete: `UPDATE ${t} SET fingerprint = $3, response = $4::jsonb, completed_at = to_timestamp($5::double precision / 1000),
        expires_at = clock_timestamp() + $6::double precision * interval '1 millisecond'
        WHERE scope = $1 AND key = $2`,
      // SKIP LOCKED: a row an acquire() is taking over stays locked while its handler runs;
      // waiting for it would hold a pool client that long.
      cleanup: `DELETE FROM ${t} WHERE (scope, key) IN
        (SELECT scope, key FROM ${t} WHERE expires_at < now() FOR UPDATE SKIP LOCKED)`,
    };
  }

  /**
   * The SQL that creates the table `table` (default `'idempotency_keys'`) and its index, as
   * `migrate()` runs it: for a migration tool of your own.
   */
  static schema(table = 'idempotency_keys') {
    return schemaSql(checkTable('PostgresStore.schema', table));
  }

  /** The table name (default `'idempotency_keys'`). */
  get table() {
    return this.#table;
  }

  /** Always `true`: `release()` rolls back what the handler wrote through `transaction()`. */
  get transactional() {
    return true;
  }

  /**
   * Create the table and its index when missing (`PostgresStore.schema(table)`). Safe to run at
   * every start, from several processes at once (they take turns on an advisory lock).
   */
  async migrate() {
    // One simple-protocol query: one implicit transaction, which holds the advisory lock to its
    // end (two concurrent CREATE TABLE IF NOT EXISTS can otherwise both try to create it).
    await this.#pool.query(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK});\n${schemaSql(this.#table)}`);
  }

  /** Delete the expired rows now; resolves with how many were deleted. */
  async cleanup() {
    const result = await this.#pool.query(this.#sql.cleanup);
    return result.rowCount ?? 0;
  }

  /** At most once a CLEANUP_INTERVAL_MS, in the background: acquire() does not wait for it. */
  #cleanupNowAndThen() {
    const now = Date.now();
    if (now - this.#lastCleanup < CLEANUP_INTERVAL_MS) return;
    this.#lastCleanup = now;
    this.cleanup().catch(() => {}); // a failed cleanup is retried next time; the keys still work
  }

  /** The open transaction of `token` on `key`, or undefined. */
  #entry(key, token) {
    const entry = this.#held.get(token);
    return entry !== undefined && entry.key === key ? entry : undefined;
  }

  /**
   * Give the entry's client back to the pool, once; with `error`, the pool destroys it (a
   * connection in an unknown state must not serve anyone else). Our 'error' listener stays on a
   * destroyed client: its connection may still report errors, and an unheard 'error' event
   * would crash Node.
   */
  #giveBack(entry, error) {
    if (entry.returned) return;
    entry.returned = true;
    if (error === undefined) entry.client.off('error', entry.onError);
    entry.client.release(error);
  }

  /** ROLLBACK; true when it worked and the connection is sound (the client can be reused). */
  async #rollback(entry) {
    if (entry.lost !== undefined) return false;
    try {
      await entry.client.query('ROLLBACK');
    } catch {
      return false;
    }
    return entry.lost === undefined;
  }

  async acquire(key, lock, lockTimeoutMs) {
    const [scope, id] = splitKey(key);
    const ms = settingMs('lockTimeoutMs', lockTimeoutMs);
    this.#cleanupNowAndThen();
    const client = await this.#pool.connect();
    if (typeof client?.release !== 'function') {
      throw new TypeError('PostgresStore: pool.connect() did not give a pool client (one with release()); pass a pg Pool, not a Client');
    }
    const entry = { key, client, lost: undefined, returned: false, onError: undefined };
    // A checked-out pg client has no 'error' listener of the pool's: without one, a connection
    // that fails between two statements (killed, timed out) would crash the process.
    entry.onError = (error) => {
      entry.lost ??= error;
      // A held transaction whose connection failed was rolled back by PostgreSQL: free the
      // pool's slot now rather than when the handler ends. (During acquire, complete and
      // release, the method in progress gives the client back.)
      if (this.#held.get(lock.token) === entry) this.#giveBack(entry, error);
    };
    client.on('error', entry.onError);
    let holding = false;
    let live; // the committed row found, if any
    try {
      await client.query(`BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '${this.#lockWaitMs}ms'`);
      const params = [scope, id, lock.fingerprint, ms];
      // A loop because the row can change between the statements: deleted by cleanup() after
      // the INSERT saw it, completed by its holder after the SELECT saw it expired.
      for (let attempt = 0; attempt < 10 && !holding; attempt++) {
        if ((await client.query(this.#sql.insert, params)).rowCount === 1) {
          holding = true;
          break;
        }
        const found = await client.query(this.#sql.select, [scope, id]);
        if (found.rowCount === 0) continue; // deleted since: insert again
        const row = found.rows[0];
        if (row.live) {
          live = row;
          break;
        }
        // Expired: take the row over; its row lock makes it this transaction's, as an insert would.
        holding = (await client.query(this.#sql.takeOver, params)).rowCount === 1;
      }
      if (live === undefined) {
        if (!holding) throw new Error(`PostgresStore: the row of ${JSON.stringify(key)} kept changing; giving up`);
        // The holder's own statements (the handler's, through ctx.tx) are not limited by
        // lockWaitMs; a holder idle for lockTimeoutMs loses the transaction, and the key.
        await client.query(`SET LOCAL lock_timeout = DEFAULT; SET LOCAL idle_in_transaction_session_timeout = ${ms}`);
      }
    } catch (error) {
      const sound = await this.#rollback(entry);
      this.#giveBack(entry, sound ? undefined : (entry.lost ?? error));
      // Another live transaction holds the key (lock_timeout ran out waiting for it).
      if (sound && error?.code === LOCK_NOT_AVAILABLE) return { ...HELD };
      throw error;
    }
    if (live !== undefined) {
      // A completed answer (or a row committed in progress): read outside the try, once the
      // client is back in the pool, so that nothing here can touch a client given back.
      this.#giveBack(entry, (await this.#rollback(entry)) ? undefined : (entry.lost ?? new Error('ROLLBACK failed')));
      return completedOrHeld(live);
    }
    if (entry.lost !== undefined) {
      this.#giveBack(entry, entry.lost);
      throw entry.lost;
    }
    this.#held.set(lock.token, entry);
    return null;
  }

  // Runs a statement in the holder's transaction, which restarts its idle timer (and sets it to
  // this lockTimeoutMs). False when the transaction is gone (connection lost, idle timeout) or
  // the token does not hold the key: a holder whose lock lapsed cannot extend anyone's.
  async renew(key, token, lock, lockTimeoutMs) {
    const entry = this.#entry(key, token);
    if (entry === undefined || entry.lost !== undefined) return false;
    const ms = settingMs('lockTimeoutMs', lockTimeoutMs);
    try {
      await entry.client.query(`SET LOCAL idle_in_transaction_session_timeout = ${ms}`);
    } catch {
      return false;
    }
    return entry.lost === undefined;
  }

  // An in-progress row is never visible to another transaction, so never judged stale.
  async reclaim() {
    return false;
  }

  async complete(key, token, record, ttlMs) {
    const entry = this.#entry(key, token);
    if (entry === undefined) return false;
    this.#held.delete(token); // from here on, renew() and transaction() no longer see it
    if (entry.lost !== undefined) {
      this.#giveBack(entry, entry.lost);
      return false; // PostgreSQL rolled it back when the connection failed: the lock was lost
    }
    const [scope, id] = splitKey(key);
    const { client } = entry;
    try {
      const params = [scope, id, record.fingerprint, JSON.stringify(record.response), record.completedAt, ttlMs];
      const updated = await client.query(this.#sql.complete, params);
      if (updated.rowCount !== 1) throw new Error(`PostgresStore: the row of ${JSON.stringify(key)} is missing from its own transaction`);
    } catch (error) {
      // Nothing was stored; the transaction (with the handler's writes) is rolled back.
      const sound = await this.#rollback(entry);
      this.#giveBack(entry, sound ? undefined : (entry.lost ?? error));
      if (entry.lost !== undefined) return false; // the connection failed: the lock was lost
      if (error?.code === IN_FAILED_TRANSACTION) {
        throw new Error(
          'PostgresStore: the transaction was aborted by a statement that failed before complete() (one through ctx.tx?); nothing was stored and its writes were rolled back',
          { cause: error },
        );
      }
      throw error;
    }
    let committed;
    try {
      committed = await client.query('COMMIT');
    } catch (error) {
      // Whether a COMMIT cut by a lost connection happened cannot be told: an error, not "false".
      this.#giveBack(entry, entry.lost ?? error);
      throw error;
    }
    this.#giveBack(entry, entry.lost);
    // PostgreSQL answers the COMMIT of a failed transaction with ROLLBACK, not an error.
    if (committed.command !== 'COMMIT') {
      throw new Error(`PostgresStore: the transaction of ${JSON.stringify(key)} was rolled back at COMMIT; nothing was stored`);
    }
    return true;
  }

  async release(key, token) {
    const entry = this.#entry(key, token);
    if (entry === undefined) return false;
    this.#held.delete(token);
    // A connection that cannot roll back is destroyed, which rolls the transaction back too.
    const sound = await this.#rollback(entry);
    this.#giveBack(entry, sound ? undefined : (entry.lost ?? new Error('ROLLBACK failed')));
    return true;
  }

  /**
   * The pg client inside the transaction that holds `key` for `token` (what the handler gets
   * as `ctx.tx`), or undefined.
   */
  transaction(key, token) {
    const entry = this.#entry(key, token);
    if (entry === undefined) return undefined;
    entry.guarded ??= guardTransaction(entry.client);
    return entry.guarded;
  }
}
