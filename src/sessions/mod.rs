//! The session store service (`hitl-operator sessions`): kagent's HTTP session and task API,
//! which kagent's agent runtime calls at `KAGENT_URL` to keep every conversation (ADK sessions,
//! their events, A2A tasks), served for every Agent the operator runs (docs/sessions.md).
//!
//! - [`store`]: the one interface ([`store::SessionStore`]), scoped per Agent, with quotas that
//!   refuse and never evict.
//! - [`memory`]: the non-durable backend (tests, clusters without storage).
//! - [`sql`]: the durable backends, SQLite (the default, on a volume) and Postgres (any number
//!   of replicas), through sqlx with embedded migrations.
//! - [`http`]: kagent's API on any store, each request scoped to the Agent its token proves,
//!   with bounded bodies and bytes in flight.
//! - [`auth`]: which Agent a token proves (TokenReview, the token's pod and its owners).
//! - [`retention`]: idle sessions (when asked) and deleted Agents' data, swept once across
//!   replicas.
//! - [`copy`]: moving a store to another database.
//! - [`server`]: the process: listeners, health, Events for refused writes.

pub mod auth;
pub mod copy;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod retention;
pub mod server;
pub mod sql;
pub mod store;
