// The services the server, soak and crash tests run against, one variable each, the
// conventional names:
//
//   REDIS_URL     a redis-server, e.g. redis://127.0.0.1:6379
//   DATABASE_URL  a PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/postgres
//
// `bash scripts/test.sh server` starts throwaway ones, sets both, and sets
// RETRY_FETCH_SERVICES=required: then a test file that needs a service that is not set fails
// (needs() throws as the file loads) instead of skipping, and the stage fails on any skipped
// test anyway (scripts/test.sh reads the TAP). Run by hand (`REDIS_URL=... node --test
// tests/server/`), a test whose service is not set is skipped with a message that says so.

export const REDIS_URL = process.env.REDIS_URL || undefined;
export const DATABASE_URL = process.env.DATABASE_URL || undefined;

/** RETRY_FETCH_SERVICES=required (scripts/test.sh server): a missing service is a failure. */
export const SERVICES_REQUIRED = process.env.RETRY_FETCH_SERVICES === 'required';

const WHAT = {
  REDIS_URL: 'a redis-server, e.g. redis://127.0.0.1:6379',
  DATABASE_URL: 'a PostgreSQL database, e.g. postgres://postgres@127.0.0.1:5432/postgres',
};

/**
 * The `skip` option of a test that needs the services named ('REDIS_URL', 'DATABASE_URL'):
 * `false` when every one is set; else the reason to skip. With RETRY_FETCH_SERVICES=required
 * it throws instead, so the test file fails.
 */
export function needs(...names) {
  for (const name of names) if (!Object.hasOwn(WHAT, name)) throw new TypeError(`needs: unknown service variable ${name}`);
  const missing = names.filter((name) => !process.env[name]);
  if (missing.length === 0) return false;
  const reason = `${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} not set (${missing.map((name) => WHAT[name]).join('; ')}; \`bash scripts/test.sh server\` starts both and sets them)`;
  if (SERVICES_REQUIRED) throw new Error(`${reason}, and RETRY_FETCH_SERVICES=required: a test that needs it fails rather than skip`);
  return reason;
}
