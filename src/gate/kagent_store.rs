//! The agent's session and task store: what kagent's controller keeps for the agents it runs
//! (ADK sessions, their events, A2A tasks), kept here in the gate's memory for the gate's one
//! agent, and served on the gate's MCP listener in kagent's HTTP API ([`http`]), so that the
//! agent runtime's `KAGENT_URL` can point at the gate (docs/gate.md, "The agent's session
//! store"). kagent's controller serves that API only for Agents it reconciles itself.
//!
//! Sessions are a user's: each is found by its user id and its id, and no request reads or
//! changes another user's session. Every session belongs to the gate's agent: creating one for
//! another agent is refused, as kagent refuses an agent it does not know. Tasks are the
//! agent's, not a user's, as in kagent (its task requests carry no user).
//!
//! Memory is bounded ([`Limits`]). A new session, or a write that would take the sessions past
//! their bytes, forgets the least recently written other session(s) first; an event that
//! would pass a session's cap of events, or that cannot fit even alone, is refused. A task
//! that would pass the count or bytes of tasks forgets the least recently written finished
//! tasks (completed, canceled, failed, rejected) first, and is refused when only unfinished
//! ones are left. Nothing survives a restart of the gate, nor is shared between replicas.

pub mod http;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::contract::gate_config::AgentIdentity;

/// How much the store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sessions of all users together.
    pub sessions: usize,
    /// Events of one session.
    pub events_per_session: usize,
    /// Bytes of all sessions (ids, names and events' data), approximately.
    pub session_bytes: usize,
    /// Tasks.
    pub tasks: usize,
    /// Bytes of all tasks (their JSON), approximately.
    pub task_bytes: usize,
}

/// The limits of the gate's store: with its data (32 MiB at most) and the answer to a read of
/// the largest session, the gate stays well within its container's memory limit.
pub const LIMITS: Limits = Limits {
    sessions: 1000,
    events_per_session: 5000,
    session_bytes: 24 << 20,
    tasks: 1000,
    task_bytes: 8 << 20,
};

/// Longest id (of a user, session, event or task) the store takes.
pub const MAX_ID_BYTES: usize = 256;

/// Longest session name the store takes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Bytes counted for an entry on top of its strings: what its bookkeeping costs, about.
const ENTRY_OVERHEAD: usize = 128;

/// The agent id kagent gives an agent: `<namespace>__NS__<name>`, each `-` written `_` (a
/// Python identifier), what the runtime sends as its app name and sessions' `agent_ref`.
pub fn agent_id(namespace: &str, name: &str) -> String {
    python_identifier(&format!("{namespace}/{name}"))
}

/// An agent reference (`<namespace>/<name>` or already `<namespace>__NS__<name>`) as kagent
/// compares it: `-` written `_`, `/` written `__NS__`.
pub fn python_identifier(reference: &str) -> String {
    reference.replace('-', "_").replace('/', "__NS__")
}

/// Why a request of the store failed; each becomes kagent's HTTP status for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The request is malformed, or names another agent (HTTP 400).
    BadRequest(String),
    /// The session does not belong to the agent that writes to it (HTTP 403).
    Forbidden(String),
    /// No such session or task (HTTP 404).
    NotFound(String),
    /// The write does not fit in the store's limits (HTTP 507).
    Full(String),
}

impl StoreError {
    /// The text of the error.
    pub fn message(&self) -> &str {
        match self {
            Self::BadRequest(m) | Self::Forbidden(m) | Self::NotFound(m) | Self::Full(m) => m,
        }
    }
}

/// A session as kagent's API shows it.
#[derive(Serialize, Clone, Debug, PartialEq)]
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
    /// The agent's id ([`agent_id`]).
    pub agent_id: String,
}

/// An event of a session as kagent's API shows it.
#[derive(Serialize, Clone, Debug, PartialEq)]
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
    #[serde(serialize_with = "shared_str")]
    pub data: Arc<str>,
}

fn shared_str<S: serde::Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(s)
}

/// Which events of a session a read returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// The last `limit` events when above 1 (as kagent reads it); every event otherwise.
    pub limit: i64,
    /// Only events stored after this instant.
    pub after: Option<Timestamp>,
}

struct Event {
    id: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    data: Arc<str>,
}

impl Event {
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD + self.id.len() + self.data.len()
    }
}

struct Session {
    name: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
    events: Vec<Event>,
    /// Bytes counted for the session ([`ENTRY_OVERHEAD`], ids, name, events).
    bytes: usize,
    /// Tick of its last write.
    written: u64,
}

struct Task {
    json: Arc<RawValue>,
    finished: bool,
    written: u64,
}

impl Task {
    fn bytes(&self, id: &str) -> usize {
        ENTRY_OVERHEAD + id.len() + self.json.get().len()
    }
}

#[derive(Default)]
struct Inner {
    /// Sessions by user, then by id.
    sessions: HashMap<String, HashMap<String, Session>>,
    session_count: usize,
    session_bytes: usize,
    tasks: HashMap<String, Task>,
    task_bytes: usize,
    /// The next write's tick.
    tick: u64,
}

/// The store of one agent's sessions and tasks. See the module's documentation.
pub struct KagentStore {
    agent_id: String,
    limits: Limits,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for KagentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KagentStore")
            .field("agent_id", &self.agent_id)
            .finish_non_exhaustive()
    }
}

fn check_id(what: &str, id: &str) -> Result<(), StoreError> {
    if id.len() > MAX_ID_BYTES {
        return Err(StoreError::BadRequest(format!(
            "{what} is {} bytes long: the gate's session store takes ids of at most {MAX_ID_BYTES} bytes",
            id.len()
        )));
    }
    Ok(())
}

/// A random id in the form of a UUID (version 4).
fn new_id() -> String {
    let mut b = [0u8; 16];
    // No randomness would leave only this fallback: ids unique within the process still.
    if getrandom::fill(&mut b).is_err() {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b[8..].copy_from_slice(&n.to_be_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Whether an A2A task in this state is over.
fn finished(task: &serde_json::Map<String, serde_json::Value>) -> bool {
    let state = task
        .get("status")
        .and_then(|s| s.get("state"))
        .and_then(serde_json::Value::as_str);
    matches!(
        state,
        Some("completed" | "canceled" | "failed" | "rejected")
    )
}

impl Inner {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Forgets the least recently written session other than `(user, id)`; false when there
    /// is none.
    fn evict_session(&mut self, user: &str, id: &str) -> bool {
        let oldest = self
            .sessions
            .iter()
            .flat_map(|(u, by_id)| by_id.iter().map(move |(i, s)| (s.written, u, i)))
            .filter(|(_, u, i)| (u.as_str(), i.as_str()) != (user, id))
            .min()
            .map(|(_, u, i)| (u.clone(), i.clone()));
        match oldest {
            Some((u, i)) => {
                self.remove_session(&u, &i);
                true
            }
            None => false,
        }
    }

    fn remove_session(&mut self, user: &str, id: &str) -> bool {
        let Some(by_id) = self.sessions.get_mut(user) else {
            return false;
        };
        let Some(session) = by_id.remove(id) else {
            return false;
        };
        if by_id.is_empty() {
            self.sessions.remove(user);
        }
        self.session_count -= 1;
        self.session_bytes -= session.bytes;
        true
    }

    /// Forgets the least recently written finished task other than `id`; false when there is
    /// none.
    fn evict_task(&mut self, id: &str) -> bool {
        let oldest = self
            .tasks
            .iter()
            .filter(|(i, t)| t.finished && i.as_str() != id)
            .min_by_key(|(_, t)| t.written)
            .map(|(i, _)| i.clone());
        match oldest {
            Some(i) => {
                self.remove_task(&i);
                true
            }
            None => false,
        }
    }

    fn remove_task(&mut self, id: &str) {
        if let Some(task) = self.tasks.remove(id) {
            self.task_bytes -= task.bytes(id);
        }
    }
}

impl KagentStore {
    /// An empty store for `agent`'s sessions, with the gate's [`LIMITS`].
    pub fn new(agent: &AgentIdentity) -> Self {
        Self::with_limits(agent_id(&agent.namespace, &agent.name), LIMITS)
    }

    /// An empty store for the agent of id `agent_id` ([`agent_id`]), holding up to `limits`.
    pub fn with_limits(agent_id: String, limits: Limits) -> Self {
        Self {
            agent_id,
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn view(&self, user: &str, id: &str, s: &Session) -> SessionView {
        SessionView {
            id: id.to_owned(),
            name: s.name.clone(),
            user_id: user.to_owned(),
            created_at: s.created_at,
            updated_at: s.updated_at,
            deleted_at: (),
            agent_id: self.agent_id.clone(),
        }
    }

    /// Creates `user`'s session `id` (a new random id when none) for the agent `agent_ref`
    /// names, or creates it again: its name replaced, its events kept.
    pub fn create_session(
        &self,
        user: &str,
        agent_ref: Option<&str>,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionView, StoreError> {
        let Some(agent_ref) = agent_ref else {
            return Err(StoreError::BadRequest("agent_ref is required".into()));
        };
        let id = match id.filter(|id| !id.is_empty()) {
            Some(id) => id.to_owned(),
            None => new_id(),
        };
        check_id("user_id", user)?;
        check_id("id", &id)?;
        if name.is_some_and(|n| n.len() > MAX_NAME_BYTES) {
            return Err(StoreError::BadRequest(format!(
                "name is longer than {MAX_NAME_BYTES} bytes"
            )));
        }
        if python_identifier(agent_ref) != self.agent_id {
            return Err(StoreError::BadRequest(format!(
                "Agent ref is invalid, please check the agent ref {agent_ref}: this store keeps the sessions of agent {} only",
                self.agent_id
            )));
        }
        let mut inner = self.lock();
        let tick = inner.next_tick();
        let exists = inner
            .sessions
            .get(user)
            .is_some_and(|by_id| by_id.contains_key(&id));
        if !exists {
            while inner.session_count >= self.limits.sessions && inner.evict_session(user, &id) {}
        }
        let fixed = ENTRY_OVERHEAD + user.len() + id.len();
        let new_name = name.map(str::to_owned);
        let (old_bytes, new_bytes) = match inner.sessions.get(user).and_then(|s| s.get(&id)) {
            Some(s) => {
                let old_name = s.name.as_ref().map_or(0, String::len);
                (s.bytes, s.bytes - old_name + name.map_or(0, str::len))
            }
            None => (0, fixed + name.map_or(0, str::len)),
        };
        while inner.session_bytes - old_bytes + new_bytes > self.limits.session_bytes
            && inner.evict_session(user, &id)
        {}
        if inner.session_bytes - old_bytes + new_bytes > self.limits.session_bytes {
            return Err(StoreError::Full(format!(
                "the gate's session store holds at most {} bytes of sessions",
                self.limits.session_bytes
            )));
        }
        inner.session_bytes = inner.session_bytes - old_bytes + new_bytes;
        let by_id = inner.sessions.entry(user.to_owned()).or_default();
        let session = by_id.entry(id.clone()).or_insert_with(|| Session {
            name: None,
            created_at: now,
            updated_at: now,
            events: Vec::new(),
            bytes: 0,
            written: tick,
        });
        session.name = new_name;
        session.updated_at = now;
        session.bytes = new_bytes;
        session.written = tick;
        let view = self.view(user, &id, session);
        if !exists {
            inner.session_count += 1;
        }
        Ok(view)
    }

    /// `user`'s sessions, oldest first.
    pub fn list_sessions(&self, user: &str) -> Vec<SessionView> {
        let inner = self.lock();
        let mut sessions: Vec<SessionView> = inner
            .sessions
            .get(user)
            .into_iter()
            .flatten()
            .map(|(id, s)| self.view(user, id, s))
            .collect();
        sessions.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        sessions
    }

    /// `user`'s session `id` and the events `query` selects, in the order they were stored.
    pub fn get_session(
        &self,
        user: &str,
        id: &str,
        query: EventQuery,
    ) -> Result<(SessionView, Vec<EventView>), StoreError> {
        let inner = self.lock();
        let Some(session) = inner.sessions.get(user).and_then(|by_id| by_id.get(id)) else {
            return Err(StoreError::NotFound("Session not found".into()));
        };
        let selected: Vec<&Event> = session
            .events
            .iter()
            .filter(|e| query.after.is_none_or(|after| e.created_at > after))
            .collect();
        let skip = match usize::try_from(query.limit) {
            Ok(limit) if limit > 1 => selected.len().saturating_sub(limit),
            _ => 0,
        };
        let events = selected[skip..]
            .iter()
            .map(|e| EventView {
                id: e.id.clone(),
                session_id: id.to_owned(),
                user_id: user.to_owned(),
                created_at: e.created_at,
                updated_at: e.updated_at,
                deleted_at: (),
                data: e.data.clone(),
            })
            .collect();
        Ok((self.view(user, id, session), events))
    }

    /// Forgets `user`'s session `id` and its events; nothing when there is none.
    pub fn delete_session(&self, user: &str, id: &str) {
        self.lock().remove_session(user, id);
    }

    /// Stores event `event_id` with `data` in `user`'s session `session_id`, written by the
    /// agent named `agent_name` (`X-Agent-Name`); an event of the same id is replaced in place.
    pub fn append_event(
        &self,
        user: &str,
        session_id: &str,
        agent_name: &str,
        event_id: &str,
        data: &str,
        now: Timestamp,
    ) -> Result<EventView, StoreError> {
        check_id("id", event_id)?;
        let mut inner = self.lock();
        let Some(session) = inner
            .sessions
            .get(user)
            .and_then(|by_id| by_id.get(session_id))
        else {
            return Err(StoreError::NotFound("Session not found".into()));
        };
        if python_identifier(agent_name) != self.agent_id {
            return Err(StoreError::Forbidden(
                "Session does not belong to this agent".into(),
            ));
        }
        let at = session.events.iter().rposition(|e| e.id == event_id);
        if at.is_none() && session.events.len() >= self.limits.events_per_session {
            return Err(StoreError::Full(format!(
                "session {session_id} holds {} events, the most the gate's session store keeps in one session: start a new session",
                self.limits.events_per_session
            )));
        }
        let old = at.map_or(0, |i| session.events[i].bytes());
        let created_at = at.map_or(now, |i| session.events[i].created_at);
        let event = Event {
            id: event_id.to_owned(),
            created_at,
            updated_at: now,
            data: Arc::from(data),
        };
        let grows = event.bytes() - old.min(event.bytes());
        while inner.session_bytes + grows > self.limits.session_bytes
            && inner.evict_session(user, session_id)
        {}
        if inner.session_bytes + grows > self.limits.session_bytes {
            return Err(StoreError::Full(format!(
                "session {session_id} would pass {} bytes, the most the gate's session store holds: start a new session",
                self.limits.session_bytes
            )));
        }
        let tick = inner.next_tick();
        let view = EventView {
            id: event.id.clone(),
            session_id: session_id.to_owned(),
            user_id: user.to_owned(),
            created_at: event.created_at,
            updated_at: event.updated_at,
            deleted_at: (),
            data: event.data.clone(),
        };
        let new = event.bytes();
        let session = inner
            .sessions
            .get_mut(user)
            .and_then(|by_id| by_id.get_mut(session_id))
            .expect("the session is not evicted by a write to itself");
        match at {
            Some(i) => session.events[i] = event,
            None => session.events.push(event),
        }
        session.bytes = session.bytes + new - old;
        session.updated_at = now;
        session.written = tick;
        inner.session_bytes = inner.session_bytes + new - old;
        Ok(view)
    }

    /// Stores the A2A task `task` (a JSON object) under its `id` (a new random one when it has
    /// none), replacing a task of the same id; returns it as stored.
    pub fn save_task(
        &self,
        mut task: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Arc<RawValue>, StoreError> {
        let id = match task.get("id") {
            Some(serde_json::Value::String(id)) if !id.is_empty() => id.clone(),
            None | Some(serde_json::Value::Null | serde_json::Value::String(_)) => {
                let id = new_id();
                task.insert("id".into(), id.clone().into());
                id
            }
            Some(other) => {
                return Err(StoreError::BadRequest(format!(
                    "Invalid request body: the task's id must be a string, not {other}"
                )));
            }
        };
        check_id("the task's id", &id)?;
        let done = finished(&task);
        let json: Arc<RawValue> =
            RawValue::from_string(serde_json::Value::Object(task).to_string())
                .map_err(|e| StoreError::BadRequest(format!("Invalid request body: {e}")))?
                .into();
        let mut inner = self.lock();
        let old = inner.tasks.get(&id).map_or(0, |t| t.bytes(&id));
        let new = ENTRY_OVERHEAD + id.len() + json.get().len();
        let exists = old > 0;
        while ((!exists && inner.tasks.len() >= self.limits.tasks)
            || inner.task_bytes - old + new > self.limits.task_bytes)
            && inner.evict_task(&id)
        {}
        if !exists && inner.tasks.len() >= self.limits.tasks {
            return Err(StoreError::Full(format!(
                "the gate's session store holds {} tasks, none of them finished",
                self.limits.tasks
            )));
        }
        if inner.task_bytes - old + new > self.limits.task_bytes {
            return Err(StoreError::Full(format!(
                "the gate's session store holds at most {} bytes of tasks",
                self.limits.task_bytes
            )));
        }
        let tick = inner.next_tick();
        inner.tasks.insert(
            id,
            Task {
                json: json.clone(),
                finished: done,
                written: tick,
            },
        );
        inner.task_bytes = inner.task_bytes - old + new;
        Ok(json)
    }

    /// The task `id`, as stored.
    pub fn get_task(&self, id: &str) -> Option<Arc<RawValue>> {
        self.lock().tasks.get(id).map(|t| t.json.clone())
    }

    /// Forgets the task `id`; nothing when there is none.
    pub fn delete_task(&self, id: &str) {
        self.lock().remove_task(id);
    }
}

#[cfg(test)]
mod tests;
