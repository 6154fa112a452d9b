//! The server side of idempotency keys (the IETF `Idempotency-Key` header draft: a repeat
//! gets the stored answer, a concurrent duplicate waits on a lock, keys are unique per
//! caller): reading the key, the request fingerprint, the store key scoped by the caller's
//! identity, the options of `idempotency(handler, options)`, and the per-request state
//! machine.
//!
//! Everything here is pure: the shell (`src/wasm/server/`, behind the `server` cargo
//! feature) and `js/server.js` bring the clock, the store and the handler.
//!
//! The scheme, for a request that carries a key:
//!
//! 1. parse the header ([`parse_key`]): plain, or an RFC 8941 sf-string (`"abc"`); an invalid
//!    key is a 400;
//! 2. compute the [`fingerprint`] (method, path and query, SHA-256 of the body) and the
//!    [`store_key`] (a keyed hash of the identity + key);
//! 3. take the lock atomically in the store (`SET key lock NX PX lockTimeoutMs` in Redis); on
//!    success run the handler, store its response as completed, release the lock;
//! 4. when the store already holds a record, [`claim_action`] decides what to do with it:
//!    replay it, answer 422 (another payload), wait or answer 409 (still running), or take
//!    over a lock whose holder died.
//!
//! | module | what |
//! |---|---|
//! | `key` | reading the key from its header |
//! | `scope` | the fingerprint, the store key scoped by the identity, the secret, derived keys |
//! | `state` | the per-key state machine ([`claim_action`]) |
//! | `settings` | the options, their defaults and their messages |
//! | `answers` | what is stored, what frees the key |
//! | `identity` | the default identity: credentials |

mod answers;
mod identity;
mod key;
mod scope;
mod settings;
mod state;

pub use answers::*;
pub use identity::*;
pub use key::*;
pub use scope::*;
pub use settings::*;
pub use state::*;

#[cfg(test)]
mod tests;
