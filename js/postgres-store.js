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
//
// The holder's fingerprint is not visible either, yet a request with another one must be told
// at once that the key is taken by another request (a 422, as the other stores answer), not
// wait or get a 202. So each claim first takes two shared advisory locks for its whole
// transaction (requestLocks(): one of the key and this fingerprint, then one of the key alone),
// and a claim told "held" probes them (#heldRecord()): the key's lock taken by another
// transaction while this fingerprint's is free means another request holds or claims the key,
// and none with this fingerprint does: `{ state: 'held', mismatch: true }`. Anything else (a
// holder with this fingerprint, a holder that takes no such locks, one that just ended) is
// plain "held": the request waits and asks again, so a doubt never turns into a 422.
//
// ctx.tx must not end that transaction: a COMMIT through it would commit the key in progress
// (and the handler's writes without their answer), a ROLLBACK would free the key while the
// handler runs. guardTransaction() refuses transaction control (a small SQL lexer finds the
// first words of each statement) and every use once the handler has settled
// (closeTransaction(), or complete()/release()); and whatever got past it anyway (through the
// raw connection) is caught at the end: complete() stores the answer only in the very
// transaction acquire() opened (txid_current()).
//
// The store's secret (secret()) is a row of the table too: scope '' (a real scope is 64 hex
// digits or '-'), key 'secret', the secret in `fingerprint`, expires_at 'infinity' (cleanup()
// never deletes it), committed once by whichever instance comes first.
//
// The run history (recordRun/runs) is a table of its own, `<table>_runs`, one row per run id,
// written and read on the pool in statements of their own (never a key's transaction: a run's
// record must not be rolled back with it). Rows that started more than runRetentionMs ago are
// deleted by recordRun(), at most once a minute per store object.
import { createHash } from 'node:crypto';
import { describe, optionError, checkOptionNames, newSecret, cachedSecret, SECRET_FORMAT, runRecord, runsKey } from './store-support.js';

const OPTIONS = ['pool', 'table', 'lockWaitMs', 'runRetentionMs'];

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
/** Runs older than runRetentionMs are deleted at most this often, by recordRun(). */
const RUN_CLEANUP_INTERVAL_MS = 60_000;
/** How long a run is kept, by default: 7 days. */
const DEFAULT_RUN_RETENTION_MS = 604_800_000;
const RETENTION_EXPECTED = `an integer number of milliseconds from 1 to ${Number.MAX_SAFE_INTEGER}`;
/** The most runs of one key that runs() returns: the newest (by started_at, then id). */
const MAX_RUNS_READ = 1000;
/**
 * How long release() waits for its ROLLBACK before it ends the transaction by terminating the
 * connection's backend: a statement the handler left running (blocked on a lock, a query it
 * never awaited) would hold the ROLLBACK, and the key's row with it, behind it for as long as
 * it runs.
 */
const ROLLBACK_WAIT_MS = 250;
/** Where the INSERT's result is in the results of the claim's one query (#claimSql). */
const CLAIM_INSERT = 4;
/** SQLSTATE lock_not_available: lock_timeout ran out (another live transaction holds the key). */
const LOCK_NOT_AVAILABLE = '55P03';
/** SQLSTATE undefined_table: the run history's table was not created (migrate() not run since). */
const UNDEFINED_TABLE = '42P01';
/** SQLSTATE in_failed_sql_transaction: a statement of the transaction failed before. */
const IN_FAILED_TRANSACTION = '25P02';
/** SQLSTATE no_active_sql_transaction: a SAVEPOINT outside a transaction block. */
const NO_ACTIVE_SQL_TRANSACTION = '25P01';
/** SQLSTATE division_by_zero: complete()'s guard, when its UPDATE found no row. */
const DIVISION_BY_ZERO = '22012';
/** How long complete() asks whether a COMMIT whose answer was lost happened: a second. */
const COMMIT_STATUS_WAIT_MS = 1000;
/** The advisory lock key on which migrate() calls (of any table, any process) take turns: arbitrary, an int8. */
const MIGRATE_LOCK = 7_265_846_100_211_845;

/** Where runs() and recordRun() carry the two in one statement, for the companion (src/wasm/server/store.rs). */
const START_RUN = Symbol.for('retry-fetch.startRun');

/** What acquire() returns for a key held by another live transaction. */
const HELD = Object.freeze({ state: 'held' });
/** What acquire() returns for a key another live transaction holds for another request (another fingerprint). */
const HELD_FOR_OTHER = Object.freeze({ state: 'held', mismatch: true });

/**
 * The advisory lock (a bigint, as decimal SQL text) of `parts`: the first 64 bits of the
 * SHA-256 of `retry-fetch`, the parts and NUL between them (two locks collide with odds of
 * 2^-64). The int8 form of the advisory locks, as migrate()'s.
 */
function advisoryLock(...parts) {
  return createHash('sha256').update(['retry-fetch', ...parts].join('\0')).digest().readBigInt64BE(0).toString();
}

/**
 * The two advisory locks of a claim of `scope:id` in `table` with `fingerprint`: `request`, of
 * the key and the fingerprint, and `key`, of the key alone. A claim takes both, shared, in that
 * order, before its INSERT, and keeps them to the end of its transaction (the holder's: while
 * its handler runs).
 */
function requestLocks(table, scope, id, fingerprint) {
  return {
    request: advisoryLock('request', table, scope, id, String(fingerprint)),
    key: advisoryLock('key', table, scope, id),
  };
}

/** The statements that take `locks` (shared, request's first), waiting at most lock_timeout. */
function takeLocksSql(locks) {
  return `SELECT pg_advisory_xact_lock_shared(${locks.request}); SELECT pg_advisory_xact_lock_shared(${locks.key})`;
}

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

/**
 * `value` (a string) as an SQL string literal, read the same with standard_conforming_strings on
 * or off: `'` doubled, and a `\\` doubled inside an `E'...'` literal (as pg's escapeLiteral).
 */
function literal(value) {
  const quoted = value.replaceAll("'", "''");
  return value.includes('\\') ? `E'${quoted.replaceAll('\\', '\\\\')}'` : `'${quoted}'`;
}

const INDEX_SUFFIX = '_expires_at_idx';
const RUNS_SUFFIX = '_runs';
const RUNS_KEY_INDEX_SUFFIX = '_key_started_at_idx';
const RUNS_AGE_INDEX_SUFFIX = '_started_at_idx';

/**
 * The name (unquoted, without schema) of a relation derived from `table`: the table's name
 * (without schema) + `suffix`. When that is longer than 63 characters, the name is cut shorter
 * and `_` + 8 hex digits of the SHA-256 of the whole table name (as given, schema included) go
 * before the suffix: two long names that share their beginning get one each (cut alone, the
 * second one's CREATE ... IF NOT EXISTS would find the first one's name and create nothing).
 */
function derivedName(table, suffix) {
  const base = table.split('.').pop();
  if (base.length + suffix.length <= MAX_IDENTIFIER) return `${base}${suffix}`;
  const hash = createHash('sha256').update(table).digest('hex').slice(0, 8);
  return `${base.slice(0, MAX_IDENTIFIER - suffix.length - 1 - hash.length)}_${hash}${suffix}`;
}

/** The expiry index's name, quoted: `<table>_expires_at_idx` (see derivedName()). */
function indexName(table) {
  return `"${derivedName(table, INDEX_SUFFIX)}"`;
}

/**
 * The run history's table, unquoted: `<table>_runs` in the table's schema (a long name is
 * shortened as derivedName() does).
 */
function runsTableOf(table) {
  const parts = table.split('.');
  parts[parts.length - 1] = derivedName(table, RUNS_SUFFIX);
  return parts.join('.');
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

/**
 * The run history's table and its indexes: (key, started_at) for runs(key), started_at for the
 * retention's DELETE.
 */
function runsSchemaSql(table) {
  const runs = runsTableOf(table);
  const r = quoteTable(runs);
  return `CREATE TABLE IF NOT EXISTS ${r} (
  id text PRIMARY KEY,
  key text NOT NULL,
  scope text NOT NULL,
  instance text NOT NULL,
  started_at double precision NOT NULL,
  ended_at double precision,
  outcome text,
  detail text
);
CREATE INDEX IF NOT EXISTS "${derivedName(runs, RUNS_KEY_INDEX_SUFFIX)}" ON ${r} (key, started_at);
CREATE INDEX IF NOT EXISTS "${derivedName(runs, RUNS_AGE_INDEX_SUFFIX)}" ON ${r} (started_at);
`;
}

/** A run's row as a RunRecord (`detail` only when set; numbers whatever type parsers are set). */
function runOfRow(row) {
  const run = {
    id: row.id,
    key: row.key,
    scope: row.scope,
    instance: row.instance,
    startedAt: Number(row.started_at),
    endedAt: row.ended_at === null || row.ended_at === undefined ? null : Number(row.ended_at),
    outcome: row.outcome ?? null,
  };
  if (row.detail !== null && row.detail !== undefined) run.detail = row.detail;
  return run;
}

/**
 * `<scope>:<idempotency key>` split at the first `:` (the scope never contains one). The scope
 * is never empty: scope '' is the store's secret's row.
 */
function splitKey(key) {
  const i = typeof key === 'string' ? key.indexOf(':') : -1;
  if (i < 0) throw new TypeError(`PostgresStore: the key must be "<scope>:<idempotency key>"; got ${describe(key)}`);
  if (i === 0) throw new TypeError(`PostgresStore: the key's scope must not be empty (scope '' is the store's secret's row); got ${describe(key)}`);
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
 * The record for a committed row: its stored answer, or a `HeldRecord` for a row with no answer
 * (one committed in progress, which counts as held until it expires, then is taken over):
 * `mismatch: true` when its fingerprint is not `fingerprint`. A `response` column read as text
 * (a custom jsonb parser) is parsed here.
 */
function completedOrHeld(row, fingerprint) {
  const response = typeof row.response === 'string' ? JSON.parse(row.response) : row.response;
  if (response === null || response === undefined) return { ...(row.fingerprint === fingerprint ? HELD : HELD_FOR_OTHER) };
  return {
    state: 'completed',
    fingerprint: row.fingerprint,
    response,
    completedAt: Math.round(Number(row.completed_ms)),
  };
}

// ---------------------------------------------------------------------------------------------
// The guard of ctx.tx.

/** A character that can start an unquoted identifier or keyword (PostgreSQL: any non-ASCII too). */
const IDENT_START = /[A-Za-z_\u0080-\uFFFF]/;
/** A character that can continue one (`$` too: `a$b` is one identifier). */
const IDENT_PART = /[A-Za-z0-9_$\u0080-\uFFFF]/;
/** A dollar quote's opening delimiter at `lastIndex`: `$$` or `$tag$` (a tag of any length). */
const DOLLAR_QUOTE = /\$(?:[A-Za-z_\u0080-\uFFFF][A-Za-z0-9_\u0080-\uFFFF]*)?\$/y;

/**
 * The first three tokens of each statement of `sql` (split at the `;` that are not in a
 * comment, a string, a quoted identifier or a dollar-quoted string): a keyword or unquoted
 * identifier upper-cased, anything else `'?'`. Skips `--` comments, nested `/* *\/` comments,
 * `'...'` strings (`''` inside; with `backslashes`, a `\` escapes the next character too, as with
 * standard_conforming_strings off), `E'...'` strings (backslash escapes), `"..."` identifiers
 * and `$tag$...$tag$` strings. An unterminated one runs to the end (PostgreSQL refuses the whole
 * text then, so nothing of it runs).
 */
function statementHeads(sql, backslashes) {
  const n = sql.length;
  const heads = [];
  let head = [];
  const token = (t) => {
    if (head.length < 3) head.push(t);
  };
  /** The index after the quoted text that starts at `i` (its quote `q`), `''`-style doubling inside. */
  const skipQuoted = (i, q, escapes) => {
    for (i++; i < n; i++) {
      const c = sql[i];
      if (escapes && c === '\\') i++;
      else if (c === q) {
        if (sql[i + 1] !== q) return i + 1;
        i++;
      }
    }
    return n;
  };
  let i = 0;
  while (i < n) {
    const c = sql[i];
    const next = sql[i + 1];
    if (c === ';') {
      if (head.length > 0) heads.push(head);
      head = [];
      i++;
    } else if (c === '-' && next === '-') {
      while (i < n && sql[i] !== '\n' && sql[i] !== '\r') i++;
    } else if (c === '/' && next === '*') {
      let depth = 1;
      for (i += 2; i < n && depth > 0; ) {
        if (sql[i] === '/' && sql[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (sql[i] === '*' && sql[i + 1] === '/') {
          depth--;
          i += 2;
        } else {
          i++;
        }
      }
    } else if (c === "'") {
      i = skipQuoted(i, "'", backslashes);
      token('?');
    } else if ((c === 'E' || c === 'e') && next === "'") {
      i = skipQuoted(i + 1, "'", true);
      token('?');
    } else if (c === '"') {
      i = skipQuoted(i, '"', false);
      token('?');
    } else if (c === '$') {
      DOLLAR_QUOTE.lastIndex = i;
      const open = DOLLAR_QUOTE.exec(sql);
      if (open === null) {
        i++; // a parameter ($1) or an operator character
      } else {
        const close = sql.indexOf(open[0], i + open[0].length);
        i = close < 0 ? n : close + open[0].length;
      }
      token('?');
    } else if (IDENT_START.test(c)) {
      let j = i + 1;
      while (j < n && IDENT_PART.test(sql[j])) j++;
      token(sql.slice(i, j).toUpperCase());
      i = j;
    } else if (/\s/.test(c)) {
      i++;
    } else {
      token('?'); // a number, an operator, a parenthesis...
      i++;
    }
  }
  if (head.length > 0) heads.push(head);
  return heads;
}

/** The transaction-control statement a statement's head makes (`'COMMIT'`...), or undefined. */
function transactionControl([first, second, third]) {
  switch (first) {
    case 'BEGIN':
    case 'END':
    case 'ABORT':
      return first;
    case 'COMMIT':
      return second === 'PREPARED' ? 'COMMIT PREPARED' : 'COMMIT';
    case 'ROLLBACK':
      // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name: allowed, it stays in the transaction.
      if (second === 'TO' || ((second === 'WORK' || second === 'TRANSACTION') && third === 'TO')) return undefined;
      return second === 'PREPARED' ? 'ROLLBACK PREPARED' : 'ROLLBACK';
    case 'START':
      return second === 'TRANSACTION' ? 'START TRANSACTION' : undefined;
    case 'PREPARE':
      return second === 'TRANSACTION' ? 'PREPARE TRANSACTION' : undefined;
    default:
      return undefined;
  }
}

/**
 * The first statement of `sql` that would end, or nest, the key's transaction (`'COMMIT'`,
 * `'ROLLBACK'`, `'BEGIN'`...), or undefined. Read both with and without backslash escapes in
 * plain strings (standard_conforming_strings on, the default, and off): refused if either reading
 * finds one, so a session setting cannot hide a statement inside what looks like a string.
 */
function refusedStatement(sql) {
  for (const backslashes of [false, true]) {
    for (const head of statementHeads(sql, backslashes)) {
      const control = transactionControl(head);
      if (control !== undefined) return control;
    }
  }
  return undefined;
}

/** The SQL text of what `query()` was given: a string, a config `{ text }`, a submittable. */
function sqlText(config) {
  if (typeof config === 'string') return config;
  if (typeof config !== 'object' || config === null) return undefined;
  if (typeof config.text === 'string') return config.text;
  if (typeof config.cursor?.text === 'string') return config.cursor.text; // pg-query-stream
  return undefined;
}

const SETTLED = 'PostgresStore: ctx.tx was used after its handler settled: the transaction that held the idempotency key is being committed or rolled back; run statements only while the handler runs';

/**
 * Properties of a closed `ctx.tx` that may still be read: what inspecting, logging or awaiting
 * it reads (`then`: a promise resolved with it asks), none of which reaches the connection.
 */
function harmless(prop) {
  return typeof prop === 'symbol' || prop === 'then' || prop === 'constructor';
}

/**
 * `ctx.tx`: the held client of `entry`, guarded. Its transaction is the key's lock: a `COMMIT`
 * or `ROLLBACK` through it (or a nested `BEGIN`, which pg would only warn about) would commit
 * the in-progress key or free it while the handler runs, and a duplicate could run; `release()`
 * would hand the connection to someone else. Those throw a TypeError; `SAVEPOINT` and
 * `ROLLBACK TO SAVEPOINT` work. Once `entry.closed` (the handler settled), every use throws:
 * the transaction is being committed or rolled back, and then the client serves another request.
 */
function guardTransaction(entry) {
  const client = entry.client;
  const open = () => {
    if (entry.closed) throw new TypeError(SETTLED);
  };
  const refuse = (what) => {
    throw new TypeError(`PostgresStore: ctx.tx is the transaction that holds the idempotency key: ${what} is not allowed through it (it commits with the stored answer; use SAVEPOINT / ROLLBACK TO SAVEPOINT inside it)`);
  };
  const query = (config, ...rest) => {
    open();
    const text = sqlText(config);
    const refused = text === undefined ? undefined : refusedStatement(text);
    if (refused !== undefined) refuse(JSON.stringify(refused));
    return Reflect.get(client, 'query', client).call(client, config, ...rest);
  };
  const release = () => {
    open();
    refuse('release()');
  };
  return new Proxy(client, {
    get(target, prop) {
      if (entry.closed && !harmless(prop)) throw new TypeError(SETTLED);
      if (prop === 'query') return query;
      if (prop === 'release') return release;
      const value = Reflect.get(target, prop, target);
      if (typeof value !== 'function' || prop === 'constructor') return value;
      // Bound to the client (a constructor, such as pg's _Promise, still constructs); and a
      // method taken while the handler ran (or read after it, by a symbol) refuses to run after it.
      return function (...args) {
        open();
        return new.target === undefined ? value.apply(target, args) : Reflect.construct(value, args);
      };
    },
    set(target, prop, value) {
      open();
      return Reflect.set(target, prop, value, target);
    },
    defineProperty(target, prop, descriptor) {
      open();
      return Reflect.defineProperty(target, prop, descriptor);
    },
    deleteProperty(target, prop) {
      open();
      return Reflect.deleteProperty(target, prop);
    },
  });
}

export class PostgresStore {
  #pool;
  #table;
  #sql;
  #lockWaitMs;
  #runRetentionMs;
  #lastRunCleanup = 0;
  #held = new Map(); // token -> { key, client, txid, pid, lost, returned, closed, onError, guarded }: the open transactions of this store
  // key -> when acquire() last answered that a request with the same fingerprint holds it: the
  // waiting duplicates' next asks probe first (#sameRequestBusy), without a transaction.
  #waitedOn = new Map();
  #lastCleanup = 0;
  #secret = cachedSecret(() => this.#readSecret());

  constructor(options) {
    if (typeof options !== 'object' || options === null) {
      throw optionError('PostgresStore', 'options', options, 'an object { pool, table?, lockWaitMs?, runRetentionMs? }');
    }
    checkOptionNames('PostgresStore', options, OPTIONS);
    const { pool, table = 'idempotency_keys', lockWaitMs = 50, runRetentionMs = DEFAULT_RUN_RETENTION_MS } = options;
    // A pg Client (or a client checked out of a pool) has connect() and query() too; it has a
    // processID (or release()), which a Pool has not.
    const isPool =
      typeof pool === 'object' &&
      pool !== null &&
      typeof pool.connect === 'function' &&
      typeof pool.query === 'function' &&
      !('processID' in pool) &&
      typeof pool.release !== 'function';
    if (!isPool) {
      throw optionError('PostgresStore', 'pool', pool, "a node-postgres Pool (new Pool() from the 'pg' package)");
    }
    checkTable('PostgresStore', table);
    if (!Number.isInteger(lockWaitMs) || lockWaitMs < 1 || lockWaitMs > MAX_SETTING_MS) {
      throw optionError('PostgresStore', 'lockWaitMs', lockWaitMs, LOCK_WAIT_EXPECTED);
    }
    if (!Number.isSafeInteger(runRetentionMs) || runRetentionMs < 1) {
      throw optionError('PostgresStore', 'runRetentionMs', runRetentionMs, RETENTION_EXPECTED);
    }
    this.#pool = pool;
    this.#table = table;
    this.#lockWaitMs = lockWaitMs;
    this.#runRetentionMs = runRetentionMs;
    const t = quoteTable(table);
    const r = quoteTable(runsTableOf(table));
    // A run's row: one per run id, the last write wins.
    const writeRun = `INSERT INTO ${r} (id, key, scope, instance, started_at, ended_at, outcome, detail)
        VALUES ($1, $2, $3, $4, $5::double precision, $6::double precision, $7, $8)
        ON CONFLICT (id) DO UPDATE SET key = EXCLUDED.key, scope = EXCLUDED.scope, instance = EXCLUDED.instance,
          started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at, outcome = EXCLUDED.outcome, detail = EXCLUDED.detail`;
    // The newest MAX_RUNS_READ runs of the key in parameter `param`, oldest first.
    const newestRuns = (param) => `SELECT * FROM (SELECT id, key, scope, instance, started_at, ended_at, outcome, detail FROM ${r}
        WHERE key = ${param} ORDER BY started_at DESC, id COLLATE "C" DESC LIMIT ${MAX_RUNS_READ}) newest
        ORDER BY started_at, id COLLATE "C"`;
    this.#sql = {
      // RETURNING the transaction's id, which complete() checks (one round trip for both), and
      // its backend's pid, which release() may have to terminate.
      insert: `INSERT INTO ${t} (scope, key, fingerprint, response, completed_at, expires_at)
        VALUES ($1, $2, $3, 'null'::jsonb, now(), now() + $4::double precision * interval '1 millisecond')
        ON CONFLICT (scope, key) DO NOTHING RETURNING txid_current()::text AS txid, pg_backend_pid() AS pid`,
      // The same INSERT with its values as literals, in two parts (#claimSql).
      insertInto: `INSERT INTO ${t} (scope, key, fingerprint, response, completed_at, expires_at)`,
      onConflict: 'ON CONFLICT (scope, key) DO NOTHING RETURNING txid_current()::text AS txid, pg_backend_pid() AS pid',
      // completed_at as ms since the epoch: a float8 is a JS number whatever type parsers the
      // application set for timestamptz.
      select: `SELECT fingerprint, response, (extract(epoch FROM completed_at) * 1000)::double precision AS completed_ms,
        expires_at > now() AS live FROM ${t} WHERE scope = $1 AND key = $2`,
      takeOver: `UPDATE ${t} SET fingerprint = $3, response = 'null'::jsonb, completed_at = now(),
        expires_at = now() + $4::double precision * interval '1 millisecond'
        WHERE scope = $1 AND key = $2 AND expires_at <= now() RETURNING txid_current()::text AS txid, pg_backend_pid() AS pid`,
      // clock_timestamp(), not now(): now() is when the transaction (the handler) began.
      // Only in the transaction acquire() opened: one that was ended through ctx.tx (a COMMIT
      // or ROLLBACK past the guard) has another id, or none (then this UPDATE runs on its own).
      complete: `UPDATE ${t} SET fingerprint = $3, response = $4::jsonb, completed_at = to_timestamp($5::double precision / 1000),
        expires_at = clock_timestamp() + $6::double precision * interval '1 millisecond'
        WHERE scope = $1 AND key = $2 AND txid_current() = $7::bigint`,
      // After a COMMIT through ctx.tx: the key's row committed without its answer gets it, on its
      // own (autocommit). SKIP LOCKED: a row locked now is another holder's (the committed row
      // expired and was taken over): not ours to fill, and not worth waiting for.
      salvage: `UPDATE ${t} SET response = $4::jsonb, completed_at = to_timestamp($5::double precision / 1000),
        expires_at = clock_timestamp() + $6::double precision * interval '1 millisecond'
        WHERE (scope, key) IN (SELECT scope, key FROM ${t} WHERE scope = $1 AND key = $2 AND fingerprint = $3
          AND response = 'null'::jsonb FOR UPDATE SKIP LOCKED)`,
      // The secret's row: never expires (so cleanup() never deletes it), never a key's (scope '').
      createSecret: `INSERT INTO ${t} (scope, key, fingerprint, response, completed_at, expires_at)
        VALUES ('', 'secret', $1, 'null'::jsonb, now(), 'infinity') ON CONFLICT (scope, key) DO NOTHING`,
      readSecret: `SELECT fingerprint FROM ${t} WHERE scope = '' AND key = 'secret'`,
      // SKIP LOCKED: a row an acquire() is taking over stays locked while its handler runs;
      // waiting for it would hold a pool client that long.
      cleanup: `DELETE FROM ${t} WHERE (scope, key) IN
        (SELECT scope, key FROM ${t} WHERE expires_at < now() FOR UPDATE SKIP LOCKED)`,
      // The run history.
      recordRun: writeRun,
      runs: newestRuns('$1'),
      // recordRun, and runs of the run's key as they were before it (the SELECT sees the
      // statement's snapshot, without the row the WITH writes).
      startRun: `WITH started AS (${writeRun})
        ${newestRuns('$2')}`,
      // SKIP LOCKED: rows another instance is deleting (or a recordRun is writing) are left to it.
      forgetRuns: `DELETE FROM ${r} WHERE id IN
        (SELECT id FROM ${r} WHERE started_at < $1::double precision FOR UPDATE SKIP LOCKED)`,
    };
  }

  /**
   * The SQL that creates the table `table` (default `'idempotency_keys'`) and its index, as
   * `migrate()` runs it: for a migration tool of your own.
   */
  static schema(table = 'idempotency_keys') {
    return schemaSql(checkTable('PostgresStore.schema', table));
  }

  /**
   * The SQL that creates the run history's table `<table>_runs` and its indexes, as `migrate()`
   * runs it (after `schema(table)`): for a migration tool of your own.
   */
  static runsSchema(table = 'idempotency_keys') {
    return runsSchemaSql(checkTable('PostgresStore.runsSchema', table));
  }

  /** The table name (default `'idempotency_keys'`). */
  get table() {
    return this.#table;
  }

  /** The run history's table: `<table>_runs` (default `'idempotency_keys_runs'`). */
  get runsTable() {
    return runsTableOf(this.#table);
  }

  /** How long a run is kept after it started, in ms (default 7 days). */
  get runRetentionMs() {
    return this.#runRetentionMs;
  }

  /** Always `true`: `release()` rolls back what the handler wrote through `transaction()`. */
  get transactional() {
    return true;
  }

  /**
   * Create the table, the run history's table and their indexes when missing
   * (`PostgresStore.schema(table)`, `PostgresStore.runsSchema(table)`). Safe to run at every
   * start, from several processes at once (they take turns on an advisory lock).
   */
  async migrate() {
    // One simple-protocol query: one implicit transaction, which holds the advisory lock to its
    // end (two concurrent CREATE TABLE IF NOT EXISTS can otherwise both try to create it).
    await this.#pool.query(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK});\n${schemaSql(this.#table)}${runsSchemaSql(this.#table)}`);
  }

  /**
   * Store `run` in the run history's table, replacing the row of its id (every column). On the
   * pool, in a statement of its own. Then, at most once a minute per store object, the runs that
   * started more than runRetentionMs ago are deleted, in the background (a failure is ignored:
   * the next one deletes them).
   */
  async recordRun(run) {
    await this.#runsQuery(this.#sql.recordRun, this.#runParams(run));
    this.#forgetRunsNowAndThen();
  }

  /**
   * runs(run.key), then recordRun(run), in one statement (not public API): the key's runs
   * before `run`. The companion calls it where the store's `runs` and `recordRun` both carry it
   * (at START_RUN), for the start of each run.
   */
  static {
    const startRun = async function (run) {
      const result = await this.#runsQuery(this.#sql.startRun, this.#runParams(run));
      this.#forgetRunsNowAndThen();
      return result.rows.map(runOfRow);
    };
    Object.defineProperty(PostgresStore.prototype.runs, START_RUN, { value: startRun });
    Object.defineProperty(PostgresStore.prototype.recordRun, START_RUN, { value: startRun });
  }

  /** recordRun()'s parameters: `run` checked and stored as a RunRecord is. */
  #runParams(run) {
    const record = runRecord('PostgresStore', run);
    return [
      record.id,
      record.key,
      record.scope,
      record.instance,
      record.startedAt,
      record.endedAt,
      record.outcome,
      // PostgreSQL's text cannot hold a NUL: an error message that has one keeps the rest.
      record.detail === undefined ? null : record.detail.replaceAll('\0', '\uFFFD'),
    ];
  }

  /** At most once a RUN_CLEANUP_INTERVAL_MS, in the background: the runs past runRetentionMs. */
  #forgetRunsNowAndThen() {
    const now = Date.now();
    if (now - this.#lastRunCleanup >= RUN_CLEANUP_INTERVAL_MS) {
      this.#lastRunCleanup = now;
      this.#pool.query(this.#sql.forgetRuns, [now - this.#runRetentionMs]).catch(() => {});
    }
  }

  /**
   * The runs of `key` (every scope): the newest 1000 (latest `started_at`, then id), returned
   * oldest first, as the other stores do (RedisStore keeps the last 1000).
   */
  async runs(key) {
    const result = await this.#runsQuery(this.#sql.runs, [runsKey('PostgresStore', key)]);
    return result.rows.map(runOfRow);
  }

  /** A statement on the run history's table; its absence is told as such (with its fix). */
  async #runsQuery(sql, params) {
    try {
      return await this.#pool.query(sql, params);
    } catch (error) {
      if (error?.code !== UNDEFINED_TABLE) throw error;
      const fix = `run store.migrate(), or PostgresStore.runsSchema(${JSON.stringify(this.#table)}) in your migration tool`;
      throw Object.assign(new Error(`PostgresStore: the run history's table ${JSON.stringify(this.runsTable)} does not exist: ${fix}`, { cause: error }), { code: UNDEFINED_TABLE });
    }
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

  /**
   * The claim of acquire() as one simple-protocol query: BEGIN, lock_timeout lockWaitMs, the
   * claim's advisory locks (`locks`, two statements), the INSERT of the key's row (its result
   * is the fifth, CLAIM_INSERT), then the holder's settings (`#holderSettings`). `ms` is an
   * integer (settingMs); the strings are quoted literals, the locks decimal integers.
   */
  #claimSql(scope, id, fingerprint, ms, locks) {
    return `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '${this.#lockWaitMs}ms'; ${takeLocksSql(locks)};
${this.#sql.insertInto} VALUES (${literal(scope)}, ${literal(id)}, ${literal(fingerprint)}, 'null'::jsonb, now(), now() + ${ms}::double precision * interval '1 millisecond') ${this.#sql.onConflict};
${this.#holderSettings(ms)}`;
  }

  /** What a holder's transaction runs under: the session's lock_timeout, and an idle limit of `ms`. */
  #holderSettings(ms) {
    return `SET LOCAL lock_timeout = DEFAULT; SET LOCAL idle_in_transaction_session_timeout = ${ms}`;
  }

  /**
   * What acquire() answers for a key whose row another live transaction holds, told by the
   * claims' advisory locks (`locks`, this claim's; its own transaction rolled back, so it holds
   * neither): `HELD_FOR_OTHER` when no transaction holds this request's lock (tried first,
   * and kept while the key's is tried, so that none can take it in between) but one holds the
   * key's: another request holds or claims the key, and no request with this fingerprint does.
   * Otherwise `HELD` (a holder with this fingerprint, or one that takes no such locks, or one
   * that ended since: the request waits and asks again), and `HELD` too when the probe fails
   * (then the client is destroyed). A probe that says "another" is checked against the row
   * committed by then (`scope`, `id`, this request's `fingerprint`): a claim that is losing
   * holds the key's lock too, so when the holder of this fingerprint committed its answer
   * between the INSERT's lock_timeout and the probe, the probe takes the loser for the holder;
   * the committed row, read after it, is the answer then (a replay, not a 422). Gives the
   * client back to the pool.
   */
  async #heldRecord(entry, locks, scope, id, fingerprint) {
    let other = false;
    let live;
    try {
      // One statement, one implicit transaction: its locks end with it. CASE tries the key's
      // lock only once the request's is taken.
      const { rows } = await entry.client.query(
        `SELECT CASE WHEN pg_try_advisory_xact_lock(${locks.request}) THEN NOT pg_try_advisory_xact_lock(${locks.key}) ELSE false END AS other`,
      );
      other = rows?.[0]?.other === true;
      if (other) {
        const found = await entry.client.query(this.#sql.select, [scope, id]);
        if (found.rows?.[0]?.live) live = found.rows[0];
      }
    } catch (error) {
      this.#giveBack(entry, entry.lost ?? error);
      return { ...HELD };
    }
    this.#giveBack(entry, entry.lost);
    if (live !== undefined) return completedOrHeld(live, fingerprint);
    return { ...(other ? HELD_FOR_OTHER : HELD) };
  }

  async acquire(key, lock, lockTimeoutMs, { signal } = {}) {
    const [scope, id] = splitKey(key);
    const ms = settingMs('lockTimeoutMs', lockTimeoutMs);
    this.#cleanupNowAndThen();
    // A duplicate that waits asks again and again: while a request with its fingerprint still
    // holds the key (or is claiming it), it is told so by one statement on a pooled connection
    // held for that statement only, not by a claim that holds a connection for lockWaitMs.
    if (typeof lock.fingerprint === 'string' && this.#waitedOn.has(key)) {
      if (await this.#sameRequestBusy(requestLocks(this.#table, scope, id, lock.fingerprint))) return { ...HELD };
      this.#waitedOn.delete(key);
    }
    const found = await this.#claim(key, lock, ms, scope, id, signal);
    if (found?.state === 'held' && found.mismatch !== true && typeof lock.fingerprint === 'string') this.#noteWaitedOn(key);
    return found;
  }

  /**
   * Does a request with this fingerprint hold (or claim) the key, by its shared advisory lock
   * (`locks.request`)? One statement in its own implicit transaction: the exclusive try takes
   * nothing that outlives it. False when it cannot tell (the full claim then decides).
   */
  async #sameRequestBusy(locks) {
    try {
      const { rows } = await this.#pool.query(`SELECT NOT pg_try_advisory_xact_lock(${locks.request}) AS busy`);
      return rows?.[0]?.busy === true;
    } catch {
      return false;
    }
  }

  /**
   * Remember that `key` was found held by its own fingerprint: at most 10000 keys, the oldest
   * (the map's first: a key noted again moves to the end) forgotten first, and with them any
   * older than a minute.
   */
  #noteWaitedOn(key) {
    const now = performance.now();
    this.#waitedOn.delete(key);
    for (const [k, at] of this.#waitedOn) {
      if (this.#waitedOn.size < 10_000 && now - at <= 60_000) break;
      this.#waitedOn.delete(k);
    }
    this.#waitedOn.set(key, now);
  }

  async #claim(key, lock, ms, scope, id, signal) {
    const client = await this.#pool.connect();
    if (typeof client?.release !== 'function') {
      throw new TypeError('PostgresStore: pool.connect() did not give a pool client (one with release()); pass a pg Pool, not a Client');
    }
    if (signal?.aborted) {
      // The request gave up waiting for a connection (storeTimeoutMs: it was answered 503):
      // nothing is claimed for it, and the connection goes to the next in line at once.
      client.release();
      throw signal.reason;
    }
    const entry = { key, client, txid: undefined, pid: undefined, lost: undefined, returned: false, closed: false, onError: undefined, guarded: undefined };
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
    // Whether lock_timeout is lockWaitMs (bounding a wait for another holder's row) rather than
    // the session's own, and idle_in_transaction_session_timeout not yet set for the holder.
    let waiting = true;
    const locks = requestLocks(this.#table, scope, id, lock.fingerprint);
    try {
      const params = [scope, id, lock.fingerprint, ms];
      // A loop because the row can change between the statements: deleted by cleanup() after
      // the INSERT saw it, completed by its holder after the SELECT saw it expired.
      for (let attempt = 0; attempt < 10 && !holding; attempt++) {
        let inserted;
        if (attempt === 0 && typeof lock.fingerprint === 'string') {
          // One round trip: the transaction, the claim's advisory locks and the INSERT, bounded
          // by lockWaitMs, then the holder's settings (SET takes no parameters, so the values
          // are literals: the simple protocol). When the INSERT finds a committed row instead,
          // the settings are set again below before anything that could wait for a lock.
          const results = await client.query(this.#claimSql(scope, id, lock.fingerprint, ms, locks));
          inserted = Array.isArray(results) ? results[CLAIM_INSERT] : undefined;
          if (inserted === undefined) {
            throw new TypeError('PostgresStore: a query of several statements did not give one result per statement; pass a pg Pool');
          }
          waiting = false;
        } else {
          if (!waiting) {
            await client.query(`SET LOCAL lock_timeout = '${this.#lockWaitMs}ms'`);
            waiting = true;
          }
          if (attempt === 0) {
            await client.query(`BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '${this.#lockWaitMs}ms'; ${takeLocksSql(locks)}`);
          }
          inserted = await client.query(this.#sql.insert, params);
        }
        if (inserted.rowCount === 1) {
          entry.txid = inserted.rows[0].txid;
          entry.pid = inserted.rows[0].pid;
          holding = true;
          break;
        }
        // A plain SELECT takes no row lock: it never waits, whatever lock_timeout is.
        const found = await client.query(this.#sql.select, [scope, id]);
        if (found.rowCount === 0) continue; // deleted since: insert again
        const row = found.rows[0];
        if (row.live) {
          live = row;
          break;
        }
        // Expired: take the row over; its row lock makes it this transaction's, as an insert would.
        if (!waiting) {
          await client.query(`SET LOCAL lock_timeout = '${this.#lockWaitMs}ms'`);
          waiting = true;
        }
        const taken = await client.query(this.#sql.takeOver, params);
        if (taken.rowCount === 1) {
          entry.txid = taken.rows[0].txid;
          entry.pid = taken.rows[0].pid;
          holding = true;
        }
      }
      if (live === undefined) {
        if (!holding) throw new Error(`PostgresStore: the row of ${JSON.stringify(key)} kept changing; giving up`);
        // The holder's own statements (the handler's, through ctx.tx) are not limited by
        // lockWaitMs; a holder idle for lockTimeoutMs loses the transaction, and the key.
        if (waiting) await client.query(this.#holderSettings(ms));
      }
    } catch (error) {
      const sound = await this.#rollback(entry);
      // Another live transaction holds the key (lock_timeout ran out waiting for it): whose?
      if (sound && error?.code === LOCK_NOT_AVAILABLE) return this.#heldRecord(entry, locks, scope, id, lock.fingerprint);
      this.#giveBack(entry, sound ? undefined : (entry.lost ?? error));
      throw error;
    }
    if (live !== undefined) {
      // A completed answer (or a row committed in progress): read outside the try, once the
      // client is back in the pool, so that nothing here can touch a client given back.
      this.#giveBack(entry, (await this.#rollback(entry)) ? undefined : (entry.lost ?? new Error('ROLLBACK failed')));
      return completedOrHeld(live, lock.fingerprint);
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
    } catch (error) {
      // 25P02: the handler's transaction is aborted until it rolls back to a savepoint. It
      // still holds the key, and the refused statement restarted its idle clock all the same.
      if (error?.code !== '25P02') return false;
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
    entry.closed = true; // ctx.tx refuses to be used from now on (a companion that never called closeTransaction())
    if (entry.lost !== undefined) {
      this.#giveBack(entry, entry.lost);
      return false; // PostgreSQL rolled it back when the connection failed: the lock was lost
    }
    const [scope, id] = splitKey(key);
    const { client } = entry;
    const params = [scope, id, record.fingerprint, JSON.stringify(record.response), record.completedAt, ttlMs];
    if (typeof params[2] === 'string' && typeof params[3] === 'string' && Number.isFinite(params[4]) && Number.isFinite(ttlMs) && /^[0-9]+$/.test(entry.txid ?? '')) {
      return this.#completeAndCommit(entry, key, params);
    }
    let updated;
    try {
      updated = await client.query(this.#sql.complete, [...params, entry.txid]);
    } catch (error) {
      // Nothing was stored; the transaction (with the handler's writes) is rolled back.
      const sound = await this.#rollback(entry);
      this.#giveBack(entry, sound ? undefined : (entry.lost ?? error));
      if (entry.lost !== undefined) return false; // the connection failed: the lock was lost
      throw this.#completeError(error);
    }
    if (updated.rowCount !== 1) return this.#notCompleted(entry, key, params);
    let committed;
    try {
      committed = await client.query('COMMIT');
    } catch (error) {
      // A COMMIT cut by a lost connection may have happened: the pool asks the server.
      this.#giveBack(entry, entry.lost ?? error);
      if (await this.#committed(entry.txid)) return true;
      throw error;
    }
    this.#giveBack(entry, entry.lost);
    // PostgreSQL answers the COMMIT of a failed transaction with ROLLBACK, not an error.
    if (committed.command !== 'COMMIT') {
      throw new Error(`PostgresStore: the transaction of ${JSON.stringify(key)} was rolled back at COMMIT; nothing was stored`);
    }
    return true;
  }

  /**
   * complete() in one round trip: a SAVEPOINT, the UPDATE of the key's row (only in the
   * transaction acquire() opened) with a guard that fails (division by zero) when it updated
   * no row, and the COMMIT, which the guard's failure keeps from running. The values are
   * literals (the simple protocol takes no parameters; complete() checked their types). When
   * the guard fails, the UPDATE is undone (ROLLBACK TO SAVEPOINT) and #notCompleted() tells why;
   * where there is no transaction at all (ended through ctx.tx), the SAVEPOINT is refused and
   * nothing else ran.
   */
  async #completeAndCommit(entry, key, params) {
    const { client } = entry;
    const [scope, id, fingerprint, json, completedAt, ttlMs] = params;
    const sql = `SAVEPOINT retry_fetch_complete;
WITH stored AS (UPDATE ${quoteTable(this.#table)} SET fingerprint = ${literal(fingerprint)}, response = ${literal(json)}::jsonb,
  completed_at = to_timestamp(${completedAt}::double precision / 1000),
  expires_at = clock_timestamp() + ${ttlMs}::double precision * interval '1 millisecond'
  WHERE scope = ${literal(scope)} AND key = ${literal(id)} AND txid_current() = ${entry.txid}::bigint RETURNING 1)
SELECT 1 / count(*)::int AS stored FROM stored;
COMMIT`;
    let results;
    try {
      results = await client.query(sql);
    } catch (error) {
      if (entry.lost !== undefined) {
        // A COMMIT cut by a lost connection may have happened: the pool asks the server.
        this.#giveBack(entry, entry.lost);
        if (await this.#committed(entry.txid)) return true;
        throw error;
      }
      if (error?.code === DIVISION_BY_ZERO) {
        try {
          await client.query('ROLLBACK TO SAVEPOINT retry_fetch_complete');
        } catch {
          // #notCompleted() finds the transaction unusable: treated as ended
        }
        return this.#notCompleted(entry, key, params);
      }
      if (error?.code === NO_ACTIVE_SQL_TRANSACTION) return this.#notCompleted(entry, key, params);
      // Nothing was stored; the transaction (with the handler's writes) is rolled back.
      const sound = await this.#rollback(entry);
      this.#giveBack(entry, sound ? undefined : (entry.lost ?? error));
      if (entry.lost !== undefined) return false; // the connection failed: the lock was lost
      throw this.#completeError(error);
    }
    this.#giveBack(entry, entry.lost);
    const committed = Array.isArray(results) ? results[results.length - 1] : undefined;
    // PostgreSQL answers the COMMIT of a failed transaction with ROLLBACK, not an error.
    if (committed?.command !== 'COMMIT') {
      throw new Error(`PostgresStore: the transaction of ${JSON.stringify(key)} was rolled back at COMMIT; nothing was stored`);
    }
    return true;
  }

  /**
   * Did transaction `txid` commit? Asked on another connection of the pool after complete()'s
   * connection failed during its COMMIT, whose answer was lost: `txid_status()` says (asked
   * again while the server still finishes it). Within a second in all (a pool that cannot
   * connect, a server that does not answer): `false` when it did not commit, or when that
   * cannot be told by then: complete() then fails, as before.
   */
  async #committed(txid) {
    if (!/^[0-9]+$/.test(txid ?? '')) return false;
    let timer;
    const timeUp = new Promise((resolve) => {
      timer = setTimeout(resolve, COMMIT_STATUS_WAIT_MS, 'time up');
      timer.unref?.();
    });
    try {
      for (;;) {
        const asked = this.#pool.query('SELECT txid_status($1::bigint) AS status', [txid]).then((r) => r.rows[0]?.status, () => 'unknown');
        const status = await Promise.race([asked, timeUp]);
        if (status !== 'in progress') return status === 'committed';
        if ((await Promise.race([new Promise((resolve) => setTimeout(resolve, 50)), timeUp])) === 'time up') return false;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /** The error complete() throws for `error`, a failure of its UPDATE (nothing stored, rolled back). */
  #completeError(error) {
    if (error?.code === IN_FAILED_TRANSACTION) {
      return new Error(
        'PostgresStore: the transaction was aborted by a statement that failed before complete() (one through ctx.tx?); nothing was stored and its writes were rolled back',
        { cause: error },
      );
    }
    return error;
  }

  /**
   * complete()'s UPDATE found no row to fill: not the transaction acquire() opened (ended
   * through ctx.tx), or it is, but the key's row was deleted or changed in it (through ctx.tx
   * too).
   */
  async #notCompleted(entry, key, params) {
    const { client } = entry;
    let same = false;
    try {
      same = (await client.query('SELECT txid_current_if_assigned()::text AS txid')).rows[0].txid === entry.txid;
    } catch {
      // the connection cannot tell: treat it as ended (the client is destroyed)
    }
    if (!same) return this.#endedThroughTx(entry, key, params);
    const sound = await this.#rollback(entry);
    this.#giveBack(entry, sound ? undefined : (entry.lost ?? new Error('ROLLBACK failed')));
    throw new Error(`PostgresStore: the row of ${JSON.stringify(key)} is missing from its own transaction (deleted or changed through ctx.tx?); nothing was stored and its writes were rolled back`);
  }

  /**
   * complete() found the transaction acquire() opened gone: a COMMIT or ROLLBACK (or both, and a
   * BEGIN) reached the connection past ctx.tx's guard. The connection is in a state nobody
   * knows: rolled back (ending whatever transaction it is in), then destroyed. If a COMMIT got
   * through, the key's row is committed without an answer while the handler's effects before it
   * are committed: the answer is stored into that row now, outside any transaction, so that a
   * retry replays it instead of running the handler again; that is reported (console.error) and
   * counts as stored (true): throwing would have the companion answer "nothing was kept", which
   * is false. If a ROLLBACK got through, the row is gone and nothing can be stored: throws.
   */
  async #endedThroughTx(entry, key, params) {
    await this.#rollback(entry);
    this.#giveBack(entry, entry.lost ?? new Error('PostgresStore: the transaction was ended through ctx.tx'));
    let salvaged;
    try {
      salvaged = await this.#pool.query(this.#sql.salvage, params);
    } catch (error) {
      throw new Error(
        `PostgresStore: the transaction of ${JSON.stringify(key)} was ended through ctx.tx before complete() (a COMMIT or ROLLBACK that got past its guard), and storing the answer after the fact failed: nothing is stored`,
        { cause: error },
      );
    }
    if (salvaged.rowCount === 1) {
      console.error(
        `retry-fetch/server: PostgresStore: the transaction of ${JSON.stringify(key)} was ended through ctx.tx before complete() (a COMMIT that got past its guard): what the handler wrote before it was committed without the answer; the answer was stored after the fact, not atomically with those writes (a crash in between would have left the key held until lockTimeoutMs, then run again). Do not end the transaction through ctx.tx (its raw connection included).`,
      );
      return true;
    }
    throw new Error(
      `PostgresStore: the transaction of ${JSON.stringify(key)} was ended through ctx.tx before complete() (a ROLLBACK that got past its guard): the key's row is gone, so nothing is stored (what the handler wrote before the ROLLBACK was rolled back; anything after it was committed on its own)`,
    );
  }

  async release(key, token) {
    const entry = this.#entry(key, token);
    if (entry === undefined) return false;
    this.#held.delete(token);
    entry.closed = true; // ctx.tx refuses to be used from now on (a companion that never called closeTransaction())
    // A connection that cannot roll back is destroyed, which rolls the transaction back too.
    let timer;
    const late = new Promise((resolve) => (timer = setTimeout(resolve, ROLLBACK_WAIT_MS, 'late')));
    const sound = await Promise.race([this.#rollback(entry), late]);
    clearTimeout(timer);
    if (sound === 'late' || (sound === false && entry.lost === undefined)) {
      // Queued behind a statement still running (or refused by a client that does not queue
      // one behind another): the client is destroyed first (its slot in the pool is free
      // again: with every connection held by a key, the pool has one for what follows), then
      // its backend, still running that statement, is terminated: PostgreSQL rolls the
      // transaction back and frees the key's row at once.
      this.#giveBack(entry, entry.lost ?? new Error('PostgresStore: the ROLLBACK did not complete (behind a statement the handler left running); its connection was terminated'));
      await this.#terminate(entry);
      return true;
    }
    this.#giveBack(entry, sound ? undefined : (entry.lost ?? new Error('ROLLBACK failed')));
    return true;
  }

  /**
   * Terminate the backend that holds `entry`'s transaction (`pg_terminate_backend` of the pid
   * its claim returned, through the pool: allowed for a backend of the pool's own role), which
   * ends the transaction whatever it runs.
   */
  async #terminate(entry) {
    const pid = entry.pid;
    if (!Number.isSafeInteger(pid)) return;
    try {
      await this.#pool.query('SELECT pg_terminate_backend($1)', [pid]);
    } catch {
      // The pool cannot reach the server either: destroying the client is all that is left.
    }
  }

  /**
   * The pg client inside the transaction that holds `key` for `token` (what the handler gets
   * as `ctx.tx`), or undefined.
   */
  transaction(key, token) {
    const entry = this.#entry(key, token);
    if (entry === undefined) return undefined;
    entry.guarded ??= guardTransaction(entry);
    return entry.guarded;
  }

  /**
   * The handler of `key` (held by `token`) has settled: from now on every use of what
   * `transaction()` returned throws a TypeError (its transaction is about to be committed or
   * rolled back, and its client then serves someone else). `complete()` and `release()` do it
   * too, for a companion that does not call this.
   */
  closeTransaction(key, token) {
    const entry = this.#entry(key, token);
    if (entry !== undefined) entry.closed = true;
  }

  /**
   * The secret shared by every instance on this table: created by whichever comes first (an
   * `INSERT ... ON CONFLICT DO NOTHING` of a random one), then read; cached once read.
   */
  secret() {
    return this.#secret();
  }

  async #readSecret() {
    // Two statements, each in a transaction of its own: the SELECT sees the row whichever
    // instance's INSERT won (a concurrent one's INSERT waits for the winner's commit).
    await this.#pool.query(this.#sql.createSecret, [newSecret()]);
    const result = await this.#pool.query(this.#sql.readSecret);
    const secret = result.rows?.[0]?.fingerprint;
    if (typeof secret !== 'string' || !SECRET_FORMAT.test(secret)) {
      throw new TypeError(`PostgresStore: the secret's row of ${this.#table} (scope '', key 'secret') does not hold a store secret (64 hex digits); got ${describe(secret)}`);
    }
    return secret;
  }
}
