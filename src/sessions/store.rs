//! The one interface of the session store ([`SessionStore`]) and the values it speaks in.
//!
//! Every statement is scoped to one Agent ([`AgentKey`]): the HTTP layer names the Agent the
//! caller's token proved, never one the request body or a header names, so no Agent can reach
//! another's data. Within an Agent, sessions are partitioned by the user id kagent's runtime
//! sends (a partition the A2A caller asserts, not an identity; docs/sessions.md).
//!
//! Nothing is ever evicted: a write that would pass a [`Quotas`] limit is refused with
//! [`StoreError::LimitReached`] naming it. Event order is a per-session sequence number written
//! in the append's own transaction, never a timestamp; an event re-sent with the same id is
//! stored once (its data replaced in place, its place in the order kept).

use std::future::Future;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Longest id (of a user, session, event or task) the store takes.
pub const MAX_ID_BYTES: usize = 256;

/// Longest session name the store takes.
pub const MAX_NAME_BYTES: usize = 1024;

/// The Agent a statement is scoped to: its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentKey {
    /// The Agent's namespace.
    pub namespace: String,
    /// The Agent's name.
    pub name: String,
}

impl AgentKey {
    /// The Agent `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// `namespace/name`: the key the backends store (both parts are DNS names, so `/` cannot
    /// occur in either).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The Agent of a [`AgentKey::key`].
    pub fn from_key(key: &str) -> Option<Self> {
        let (namespace, name) = key.split_once('/')?;
        Some(Self::new(namespace, name))
    }

    /// The id kagent gives the agent: `<namespace>__NS__<name>`, each `-` written `_` (a
    /// Python identifier), which the runtime sends as its app name (`X-Agent-Name`) and as a
    /// session's `agent_ref`.
    pub fn kagent_id(&self) -> String {
        python_identifier(&self.key())
    }

    /// Whether `reference` (`<namespace>/<name>` or `<namespace>__NS__<name>`, as kagent
    /// accepts either) names this Agent.
    pub fn is_named_by(&self, reference: &str) -> bool {
        python_identifier(reference) == self.kagent_id()
    }
}

impl std::fmt::Display for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// An agent reference as kagent compares it: `-` written `_`, `/` written `__NS__`.
pub fn python_identifier(reference: &str) -> String {
    reference.replace('-', "_").replace('/', "__NS__")
}

/// A session as kagent's API shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SessionView {
    /// The session's id.
    pub id: String,
    /// Its name, when its creator gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The user it belongs to.
    pub user_id: String,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last created again or written to.
    pub updated_at: Timestamp,
    /// Always null: a deleted session is gone.
    pub deleted_at: (),
    /// The agent's kagent id ([`AgentKey::kagent_id`]).
    pub agent_id: String,
}

/// An event of a session as kagent's API shows it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EventView {
    /// The event's id.
    pub id: String,
    /// Its session's id.
    pub session_id: String,
    /// Its session's user.
    pub user_id: String,
    /// When it was first stored.
    pub created_at: Timestamp,
    /// When it was last stored.
    pub updated_at: Timestamp,
    /// Always null: a deleted event is gone.
    pub deleted_at: (),
    /// The event as the runtime sent it: its JSON, as a string.
    pub data: String,
}

/// Which events of a session a read returns, always in the order they were first stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// The last `limit` events when above 0 (kagent-adk 0.7.4 asks for its
    /// `num_recent_events`); every event otherwise (`-1`, as the runtimes send).
    pub limit: i64,
    /// Only events first stored after this instant.
    pub after: Option<Timestamp>,
}

/// An A2A task to store: its id, whether it is over, and its JSON exactly as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRecord {
    /// The task's id.
    pub id: String,
    /// Whether its state is final (completed, canceled, failed, rejected).
    pub finished: bool,
    /// The task, as the JSON text the runtime sent.
    pub json: String,
}

impl TaskRecord {
    /// The A2A task of JSON text `json`: its id and whether its state is final, read without
    /// building a JSON tree; the text is kept as it is.
    pub fn from_json(json: String) -> Result<Self, String> {
        #[derive(Deserialize)]
        struct Head {
            id: Option<String>,
            status: Option<Status>,
        }
        #[derive(Deserialize)]
        struct Status {
            state: Option<String>,
        }
        let head: Head = serde_json::from_str(&json).map_err(|e| e.to_string())?;
        let id = head
            .id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| "the task has no id".to_owned())?;
        let finished = matches!(
            head.status.and_then(|s| s.state).as_deref(),
            Some("completed" | "canceled" | "failed" | "rejected")
        );
        Ok(Self { id, finished, json })
    }
}

/// A limit of [`Quotas`], as named in errors, metrics (`limit` label) and Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Sessions of one Agent.
    SessionsPerAgent,
    /// Events of one session.
    EventsPerSession,
    /// Bytes of one session (its events' ids and data, its id and name).
    BytesPerSession,
    /// Bytes of one Agent (its sessions and tasks).
    BytesPerAgent,
    /// Tasks of one Agent.
    TasksPerAgent,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Limit; 5] = [
        Limit::SessionsPerAgent,
        Limit::EventsPerSession,
        Limit::BytesPerSession,
        Limit::BytesPerAgent,
        Limit::TasksPerAgent,
    ];

    /// The limit's name: its metric label and the flag that sets it (`--max-<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::SessionsPerAgent => "sessions-per-agent",
            Limit::EventsPerSession => "events-per-session",
            Limit::BytesPerSession => "bytes-per-session",
            Limit::BytesPerAgent => "bytes-per-agent",
            Limit::TasksPerAgent => "tasks-per-agent",
        }
    }
}

/// How much one Agent may keep. A write past any of these is refused; nothing is evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// Sessions of one Agent, all users together.
    pub sessions_per_agent: u64,
    /// Events of one session.
    pub events_per_session: u64,
    /// Bytes of one session ([`Limit::BytesPerSession`]).
    pub bytes_per_session: u64,
    /// Bytes of one Agent: its sessions and its tasks.
    pub bytes_per_agent: u64,
    /// Tasks of one Agent.
    pub tasks_per_agent: u64,
}

impl Quotas {
    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> u64 {
        match limit {
            Limit::SessionsPerAgent => self.sessions_per_agent,
            Limit::EventsPerSession => self.events_per_session,
            Limit::BytesPerSession => self.bytes_per_session,
            Limit::BytesPerAgent => self.bytes_per_agent,
            Limit::TasksPerAgent => self.tasks_per_agent,
        }
    }
}

impl Default for Quotas {
    /// The chart's defaults (values.yaml `sessions.quotas`).
    fn default() -> Self {
        Self {
            sessions_per_agent: 10_000,
            events_per_session: 10_000,
            bytes_per_session: 32 << 20,
            bytes_per_agent: 1 << 30,
            tasks_per_agent: 10_000,
        }
    }
}

/// Bytes counted for a session on top of its strings, and for each event and task: what its
/// row and indexes cost, about. Both backends count the same.
pub const ROW_OVERHEAD: u64 = 128;

/// Bytes a session row is counted for.
pub fn session_bytes(user: &str, id: &str, name: Option<&str>) -> u64 {
    ROW_OVERHEAD + (user.len() + id.len() + name.map_or(0, str::len)) as u64
}

/// Bytes an event is counted for.
pub fn event_bytes(id: &str, data: &str) -> u64 {
    ROW_OVERHEAD + (id.len() + data.len()) as u64
}

/// Bytes a task is counted for.
pub fn task_bytes(task: &TaskRecord) -> u64 {
    ROW_OVERHEAD + (task.id.len() + task.json.len()) as u64
}

/// Why a statement failed; each becomes an HTTP status of kagent's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The request is malformed (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// No such session or task for this Agent and user (HTTP 404).
    #[error("{0}")]
    NotFound(String),
    /// The write would pass a quota (HTTP 507); nothing was written.
    #[error("{message}")]
    LimitReached {
        /// Which quota.
        limit: Limit,
        /// The error's text, naming the limit and its value.
        message: String,
    },
    /// The database did not answer or failed (HTTP 503); nothing is known to be written.
    #[error("session store database: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// The refusal of a write that would pass `limit` of `quotas`, worded for the caller.
    pub fn limit(limit: Limit, quotas: &Quotas, what: &str) -> Self {
        Self::LimitReached {
            limit,
            message: format!(
                "session store limit {} ({}) reached: {what}; nothing was written (raise the chart value sessions.quotas, or delete old sessions)",
                limit.as_str(),
                quotas.get(limit),
            ),
        }
    }

    /// The "no such session" answer, as kagent words it.
    pub fn session_not_found() -> Self {
        Self::NotFound("Session not found".into())
    }
}

/// Checks an id before a backend stores it: non-empty, at most [`MAX_ID_BYTES`], and free of
/// characters that mean something in a URL (`?`, `&`, `#`, `%`, `/`) or that no one can see
/// (controls): kagent's runtime writes ids into URLs unescaped, so such an id would let a
/// context id choose another user's session.
pub fn check_id(what: &str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() {
        return Err(StoreError::BadRequest(format!("{what} is empty")));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(StoreError::BadRequest(format!(
            "{what} is {} bytes long: the session store takes ids of at most {MAX_ID_BYTES} bytes",
            id.len()
        )));
    }
    if let Some(c) = id
        .chars()
        .find(|c| matches!(c, '?' | '&' | '#' | '%' | '/') || c.is_control())
    {
        return Err(StoreError::BadRequest(format!(
            "{what} {id:?} contains {c:?}: ids may not contain ?, &, #, %, / or control characters"
        )));
    }
    Ok(())
}

/// Checks a session's name before a backend stores it: at most [`MAX_NAME_BYTES`].
pub fn check_name(name: Option<&str>) -> Result<(), StoreError> {
    match name {
        Some(name) if name.len() > MAX_NAME_BYTES => Err(StoreError::BadRequest(format!(
            "name is {} bytes long: the session store takes names of at most {MAX_NAME_BYTES} bytes",
            name.len()
        ))),
        _ => Ok(()),
    }
}

/// `at` as every backend keeps it: to the microsecond (the SQL stores keep instants as BIGINT
/// microseconds since the Unix epoch), so that what a write answers equals what a read returns.
pub fn stored_instant(at: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(at.as_microsecond()).unwrap_or(at)
}

/// Checks a session about to be created (its user, id and name) and gives its id: the one asked
/// for, or a new random one.
pub fn new_session_id(
    user: &str,
    id: Option<&str>,
    name: Option<&str>,
) -> Result<String, StoreError> {
    check_id("user_id", user)?;
    let id = match id {
        Some(id) => id.to_owned(),
        None => new_id()?,
    };
    check_id("session id", &id)?;
    check_name(name)?;
    Ok(id)
}

/// A random id in the form of a UUID (version 4), for a session created without one.
pub fn new_id() -> Result<String, StoreError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| StoreError::Unavailable(format!("randomness: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    ))
}

/// Counts of what one Agent keeps (for retention logs, `copy` and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Sessions.
    pub sessions: u64,
    /// Events of all its sessions.
    pub events: u64,
    /// Tasks.
    pub tasks: u64,
    /// Bytes counted against [`Quotas::bytes_per_agent`].
    pub bytes: u64,
}

/// The session store: kagent's sessions, events and tasks, each statement scoped to one Agent.
/// Implemented by the in-memory store ([`super::memory`]) and the SQL stores
/// ([`super::sql`], SQLite and Postgres); the HTTP layer ([`super::http`]) serves any of them.
pub trait SessionStore: Send + Sync + 'static {
    /// Creates `user`'s session `id` (a new random id when `None`), or creates it again: its
    /// name replaced, its events kept. Refused past [`Limit::SessionsPerAgent`] (a new one) or
    /// a bytes limit.
    fn create_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> impl Future<Output = Result<SessionView, StoreError>> + Send;

    /// `user`'s sessions of `agent`, oldest first (by creation, then id).
    fn list_sessions(
        &self,
        agent: &AgentKey,
        user: &str,
    ) -> impl Future<Output = Result<Vec<SessionView>, StoreError>> + Send;

    /// The bytes counted for `user`'s session `id` ([`Limit::BytesPerSession`]), `None` when
    /// there is none: what a read of it will hold in memory, about.
    fn session_size(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;

    /// `user`'s session `id` and the events `query` selects, in their sequence order.
    fn get_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
        query: EventQuery,
    ) -> impl Future<Output = Result<(SessionView, Vec<EventView>), StoreError>> + Send;

    /// Deletes `user`'s session `id` and its events; nothing when there is none.
    fn delete_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Appends event `event_id` to `user`'s session `session`, or replaces the data of the
    /// event of that id in place. [`StoreError::NotFound`] when the session does not exist.
    fn append_event(
        &self,
        agent: &AgentKey,
        user: &str,
        session: &str,
        event_id: &str,
        data: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<EventView, StoreError>> + Send;

    /// Stores `task` under its id, replacing a task of the same id of this Agent.
    fn save_task(
        &self,
        agent: &AgentKey,
        task: &TaskRecord,
        now: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The task `id` of `agent`, as stored.
    fn get_task(
        &self,
        agent: &AgentKey,
        id: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Deletes the task `id` of `agent`; nothing when there is none.
    fn delete_task(
        &self,
        agent: &AgentKey,
        id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// What `agent` keeps.
    fn usage(&self, agent: &AgentKey) -> impl Future<Output = Result<Usage, StoreError>> + Send;

    /// Every Agent that keeps anything.
    fn agents(&self) -> impl Future<Output = Result<Vec<AgentKey>, StoreError>> + Send;

    /// Deletes every session and task of `agent`, and the record of it found deleted
    /// ([`SessionStore::note_missing`]); returns how many sessions and tasks went.
    fn forget_agent(
        &self,
        agent: &AgentKey,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes the sessions last written before `before` (and their events), and the tasks
    /// last written before it; returns how many went.
    fn delete_idle(
        &self,
        before: Timestamp,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Claims the sweep named `sweep` for the period that began at `period_start`: true for
    /// exactly one caller per period, across every process sharing the database.
    fn claim_sweep(
        &self,
        sweep: &str,
        period_start: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records that `agent` was found deleted at `now`, unless an earlier instant is already
    /// recorded; returns the instant recorded (when it was first found deleted).
    fn note_missing(
        &self,
        agent: &AgentKey,
        now: Timestamp,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// Forgets that `agent` was found deleted (it exists again).
    fn note_present(&self, agent: &AgentKey)
    -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every session of `agent`, of all users (for `copy`), oldest first.
    fn all_sessions(
        &self,
        agent: &AgentKey,
    ) -> impl Future<Output = Result<Vec<SessionView>, StoreError>> + Send;

    /// The ids of every task of `agent` (for `copy`).
    fn task_ids(
        &self,
        agent: &AgentKey,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Whether the database answers (readiness).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}
