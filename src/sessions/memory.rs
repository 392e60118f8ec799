//! The in-memory session store: the same semantics and quotas as the SQL stores
//! ([`super::sql`]), held in the process's memory. Nothing survives a restart of the process
//! nor is shared between replicas: it serves tests, and clusters without storage as an explicit,
//! documented choice (docs/sessions.md). Nothing is ever evicted: a write past a quota is
//! refused ([`StoreError::LimitReached`]), as in the SQL stores.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use jiff::Timestamp;

use super::store::{
    AgentKey, EventQuery, EventView, Limit, Quotas, SessionStore, SessionView, StoreError,
    TaskRecord, Usage, check_id, event_bytes, new_session_id, session_bytes, stored_instant,
    task_bytes,
};

/// An event of a session.
struct Event {
    id: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    data: String,
    /// Bytes counted for it ([`event_bytes`]).
    bytes: u64,
}

/// A session: its events in sequence order (the order each id was first stored).
struct Session {
    name: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
    events: Vec<Event>,
    /// The position in `events` of each event id.
    positions: HashMap<String, usize>,
    /// Bytes counted for it: [`session_bytes`] and its events' [`event_bytes`].
    bytes: u64,
}

/// A task of an Agent.
struct Task {
    json: String,
    updated_at: Timestamp,
    /// Bytes counted for it ([`task_bytes`]).
    bytes: u64,
}

/// What one Agent keeps.
#[derive(Default)]
struct AgentData {
    /// Sessions by user, then by id.
    sessions: HashMap<String, HashMap<String, Session>>,
    session_count: u64,
    event_count: u64,
    tasks: HashMap<String, Task>,
    /// Bytes counted against [`Quotas::bytes_per_agent`]: its sessions and tasks.
    bytes: u64,
}

impl AgentData {
    fn is_empty(&self) -> bool {
        self.session_count == 0 && self.tasks.is_empty()
    }

    fn session(&self, user: &str, id: &str) -> Option<&Session> {
        self.sessions.get(user).and_then(|by_id| by_id.get(id))
    }

    fn session_mut(&mut self, user: &str, id: &str) -> Option<&mut Session> {
        self.sessions
            .get_mut(user)
            .and_then(|by_id| by_id.get_mut(id))
    }

    /// Removes `user`'s session `id`, keeping the counters right; whether there was one.
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
        self.event_count -= session.events.len() as u64;
        self.bytes -= session.bytes;
        true
    }
}

#[derive(Default)]
struct Inner {
    agents: HashMap<AgentKey, AgentData>,
    /// The period each sweep was last claimed for.
    sweeps: HashMap<String, Timestamp>,
    /// When each Agent was first found deleted.
    missing: HashMap<AgentKey, Timestamp>,
}

impl Inner {
    /// Drops `agent`'s entry when it keeps nothing, as the SQL stores' [`SessionStore::agents`]
    /// lists only Agents that keep something.
    fn tidy(&mut self, agent: &AgentKey) {
        if self.agents.get(agent).is_some_and(AgentData::is_empty) {
            self.agents.remove(agent);
        }
    }
}

/// The in-memory session store. See the module's documentation.
pub struct MemoryStore {
    quotas: Quotas,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("quotas", &self.quotas)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    /// An empty store with the default [`Quotas`].
    fn default() -> Self {
        Self::new(Quotas::default())
    }
}

/// Whether `value + grow` stays within `max`; a write that does not grow always does.
fn fits(value: u64, grow: i64, max: u64) -> bool {
    grow <= 0 || value.saturating_add(grow.unsigned_abs()) <= max
}

/// `value + delta`, `delta` possibly negative.
fn add(value: u64, delta: i64) -> u64 {
    value.saturating_add_signed(delta)
}

fn delta(new: u64, old: u64) -> i64 {
    new as i64 - old as i64
}

fn session_view(agent: &AgentKey, user: &str, id: &str, s: &Session) -> SessionView {
    SessionView {
        id: id.to_owned(),
        name: s.name.clone(),
        user_id: user.to_owned(),
        created_at: s.created_at,
        updated_at: s.updated_at,
        deleted_at: (),
        agent_id: agent.kagent_id(),
    }
}

fn event_view(user: &str, session: &str, e: &Event) -> EventView {
    EventView {
        id: e.id.clone(),
        session_id: session.to_owned(),
        user_id: user.to_owned(),
        created_at: e.created_at,
        updated_at: e.updated_at,
        deleted_at: (),
        data: e.data.clone(),
    }
}

impl MemoryStore {
    /// An empty store whose writes are bounded by `quotas`.
    pub fn new(quotas: Quotas) -> Self {
        Self {
            quotas,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn refuse(&self, limit: Limit, what: &str) -> StoreError {
        StoreError::limit(limit, &self.quotas, what)
    }

    fn create(
        &self,
        agent: &AgentKey,
        user: &str,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionView, StoreError> {
        let id = new_session_id(user, id, name)?;
        let now = stored_instant(now);
        let q = self.quotas;
        let new_bytes = session_bytes(user, &id, name);
        let mut inner = self.lock();
        let data = inner.agents.entry(agent.clone()).or_default();
        match data.session(user, &id) {
            Some(s) => {
                let grow = delta(new_bytes, session_bytes(user, &id, s.name.as_deref()));
                if !fits(s.bytes, grow, q.bytes_per_session) {
                    return Err(self.refuse(
                        Limit::BytesPerSession,
                        &format!("session {id} would grow past it with its new name"),
                    ));
                }
                if !fits(data.bytes, grow, q.bytes_per_agent) {
                    return Err(self.refuse(
                        Limit::BytesPerAgent,
                        &format!("agent {agent} would grow past it with session {id}'s new name"),
                    ));
                }
                data.bytes = add(data.bytes, grow);
                let s = data
                    .session_mut(user, &id)
                    .expect("the session was just found");
                s.bytes = add(s.bytes, grow);
                s.name = name.map(str::to_owned);
                s.updated_at = now;
                Ok(session_view(agent, user, &id, s))
            }
            None => {
                let refused = if new_bytes > q.bytes_per_session {
                    Some((
                        Limit::BytesPerSession,
                        format!("a new session {id} is larger"),
                    ))
                } else if data.session_count + 1 > q.sessions_per_agent {
                    Some((
                        Limit::SessionsPerAgent,
                        format!("agent {agent} keeps {} sessions", data.session_count),
                    ))
                } else if !fits(data.bytes, new_bytes as i64, q.bytes_per_agent) {
                    Some((
                        Limit::BytesPerAgent,
                        format!("agent {agent} would grow past it with a new session {id}"),
                    ))
                } else {
                    None
                };
                if let Some((limit, what)) = refused {
                    inner.tidy(agent);
                    return Err(self.refuse(limit, &what));
                }
                let session = Session {
                    name: name.map(str::to_owned),
                    created_at: now,
                    updated_at: now,
                    events: Vec::new(),
                    positions: HashMap::new(),
                    bytes: new_bytes,
                };
                let view = session_view(agent, user, &id, &session);
                data.sessions
                    .entry(user.to_owned())
                    .or_default()
                    .insert(id, session);
                data.session_count += 1;
                data.bytes += new_bytes;
                Ok(view)
            }
        }
    }

    fn append(
        &self,
        agent: &AgentKey,
        user: &str,
        session: &str,
        event_id: &str,
        data: &str,
        now: Timestamp,
    ) -> Result<EventView, StoreError> {
        check_id("event id", event_id)?;
        let now = stored_instant(now);
        let q = self.quotas;
        let bytes = event_bytes(event_id, data);
        let mut inner = self.lock();
        let Some(agent_data) = inner.agents.get_mut(agent) else {
            return Err(StoreError::session_not_found());
        };
        let agent_bytes = agent_data.bytes;
        let Some(s) = agent_data.session_mut(user, session) else {
            return Err(StoreError::session_not_found());
        };
        let at = s.positions.get(event_id).copied();
        let grow = delta(bytes, at.map_or(0, |i| s.events[i].bytes));
        if at.is_none() && s.events.len() as u64 + 1 > q.events_per_session {
            return Err(self.refuse(
                Limit::EventsPerSession,
                &format!("session {session} holds {} events", s.events.len()),
            ));
        }
        if !fits(s.bytes, grow, q.bytes_per_session) {
            return Err(self.refuse(
                Limit::BytesPerSession,
                &format!("session {session} would grow past it with event {event_id}"),
            ));
        }
        if !fits(agent_bytes, grow, q.bytes_per_agent) {
            return Err(self.refuse(
                Limit::BytesPerAgent,
                &format!("agent {agent} would grow past it with event {event_id}"),
            ));
        }
        let event = match at {
            Some(i) => {
                let e = &mut s.events[i];
                e.data = data.to_owned();
                e.updated_at = now;
                e.bytes = bytes;
                &*e
            }
            None => {
                s.positions.insert(event_id.to_owned(), s.events.len());
                s.events.push(Event {
                    id: event_id.to_owned(),
                    created_at: now,
                    updated_at: now,
                    data: data.to_owned(),
                    bytes,
                });
                s.events.last().expect("an event was just pushed")
            }
        };
        let view = event_view(user, session, event);
        s.bytes = add(s.bytes, grow);
        s.updated_at = now;
        agent_data.bytes = add(agent_data.bytes, grow);
        if at.is_none() {
            agent_data.event_count += 1;
        }
        Ok(view)
    }

    fn save(&self, agent: &AgentKey, task: &TaskRecord, now: Timestamp) -> Result<(), StoreError> {
        check_id("task id", &task.id)?;
        let now = stored_instant(now);
        let q = self.quotas;
        let bytes = task_bytes(task);
        let mut inner = self.lock();
        let data = inner.agents.entry(agent.clone()).or_default();
        let old = data.tasks.get(&task.id).map(|t| t.bytes);
        let grow = delta(bytes, old.unwrap_or(0));
        let refused = if old.is_none() && data.tasks.len() as u64 + 1 > q.tasks_per_agent {
            Some((
                Limit::TasksPerAgent,
                format!("agent {agent} keeps {} tasks", data.tasks.len()),
            ))
        } else if !fits(data.bytes, grow, q.bytes_per_agent) {
            Some((
                Limit::BytesPerAgent,
                format!("agent {agent} would grow past it with task {}", task.id),
            ))
        } else {
            None
        };
        if let Some((limit, what)) = refused {
            inner.tidy(agent);
            return Err(self.refuse(limit, &what));
        }
        data.tasks.insert(
            task.id.clone(),
            Task {
                json: task.json.clone(),
                updated_at: now,
                bytes,
            },
        );
        data.bytes = add(data.bytes, grow);
        Ok(())
    }

    fn delete_idle_now(&self, before: Timestamp) -> u64 {
        let mut inner = self.lock();
        let mut gone = 0;
        for data in inner.agents.values_mut() {
            let idle: Vec<(String, String)> = data
                .sessions
                .iter()
                .flat_map(|(user, by_id)| {
                    by_id
                        .iter()
                        .filter(|(_, s)| s.updated_at < before)
                        .map(move |(id, _)| (user.clone(), id.clone()))
                })
                .collect();
            for (user, id) in idle {
                data.remove_session(&user, &id);
                gone += 1;
            }
            let tasks_before = data.tasks.len();
            let mut freed = 0;
            data.tasks.retain(|_, t| {
                let keep = t.updated_at >= before;
                if !keep {
                    freed += t.bytes;
                }
                keep
            });
            data.bytes -= freed;
            gone += (tasks_before - data.tasks.len()) as u64;
        }
        inner.agents.retain(|_, data| !data.is_empty());
        gone
    }
}

impl SessionStore for MemoryStore {
    async fn create_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionView, StoreError> {
        self.create(agent, user, id, name, now)
    }

    async fn list_sessions(
        &self,
        agent: &AgentKey,
        user: &str,
    ) -> Result<Vec<SessionView>, StoreError> {
        let inner = self.lock();
        let mut sessions: Vec<SessionView> = inner
            .agents
            .get(agent)
            .and_then(|data| data.sessions.get(user))
            .into_iter()
            .flatten()
            .map(|(id, s)| session_view(agent, user, id, s))
            .collect();
        sessions.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(sessions)
    }

    async fn session_size(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> Result<Option<u64>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .agents
            .get(agent)
            .and_then(|data| data.session(user, id))
            .map(|s| s.bytes))
    }

    async fn get_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
        query: EventQuery,
    ) -> Result<(SessionView, Vec<EventView>), StoreError> {
        let inner = self.lock();
        let Some(s) = inner.agents.get(agent).and_then(|d| d.session(user, id)) else {
            return Err(StoreError::session_not_found());
        };
        let after = query.after.map(stored_instant);
        let selected: Vec<&Event> = s
            .events
            .iter()
            .filter(|e| after.is_none_or(|after| e.created_at > after))
            .collect();
        let skip = match usize::try_from(query.limit) {
            Ok(limit) if limit > 0 => selected.len().saturating_sub(limit),
            _ => 0,
        };
        let events = selected[skip..]
            .iter()
            .map(|e| event_view(user, id, e))
            .collect();
        Ok((session_view(agent, user, id, s), events))
    }

    async fn delete_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(data) = inner.agents.get_mut(agent) {
            data.remove_session(user, id);
            inner.tidy(agent);
        }
        Ok(())
    }

    async fn append_event(
        &self,
        agent: &AgentKey,
        user: &str,
        session: &str,
        event_id: &str,
        data: &str,
        now: Timestamp,
    ) -> Result<EventView, StoreError> {
        self.append(agent, user, session, event_id, data, now)
    }

    async fn save_task(
        &self,
        agent: &AgentKey,
        task: &TaskRecord,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.save(agent, task, now)
    }

    async fn get_task(&self, agent: &AgentKey, id: &str) -> Result<Option<String>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .agents
            .get(agent)
            .and_then(|data| data.tasks.get(id))
            .map(|t| t.json.clone()))
    }

    async fn delete_task(&self, agent: &AgentKey, id: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if let Some(data) = inner.agents.get_mut(agent)
            && let Some(task) = data.tasks.remove(id)
        {
            data.bytes -= task.bytes;
            inner.tidy(agent);
        }
        Ok(())
    }

    async fn usage(&self, agent: &AgentKey) -> Result<Usage, StoreError> {
        let inner = self.lock();
        Ok(inner
            .agents
            .get(agent)
            .map_or_else(Usage::default, |data| Usage {
                sessions: data.session_count,
                events: data.event_count,
                tasks: data.tasks.len() as u64,
                bytes: data.bytes,
            }))
    }

    async fn agents(&self) -> Result<Vec<AgentKey>, StoreError> {
        let inner = self.lock();
        let mut agents: Vec<AgentKey> = inner.agents.keys().cloned().collect();
        agents.sort();
        Ok(agents)
    }

    async fn forget_agent(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        inner.missing.remove(agent);
        Ok(inner
            .agents
            .remove(agent)
            .map_or(0, |data| data.session_count + data.tasks.len() as u64))
    }

    async fn delete_idle(&self, before: Timestamp) -> Result<u64, StoreError> {
        Ok(self.delete_idle_now(stored_instant(before)))
    }

    async fn claim_sweep(&self, sweep: &str, period_start: Timestamp) -> Result<bool, StoreError> {
        let period_start = stored_instant(period_start);
        let mut inner = self.lock();
        match inner.sweeps.get(sweep) {
            Some(claimed) if *claimed >= period_start => Ok(false),
            _ => {
                inner.sweeps.insert(sweep.to_owned(), period_start);
                Ok(true)
            }
        }
    }

    async fn note_missing(
        &self,
        agent: &AgentKey,
        now: Timestamp,
    ) -> Result<Timestamp, StoreError> {
        let now = stored_instant(now);
        let mut inner = self.lock();
        let since = inner.missing.entry(agent.clone()).or_insert(now);
        if now < *since {
            *since = now;
        }
        Ok(*since)
    }

    async fn note_present(&self, agent: &AgentKey) -> Result<(), StoreError> {
        self.lock().missing.remove(agent);
        Ok(())
    }

    async fn all_sessions(&self, agent: &AgentKey) -> Result<Vec<SessionView>, StoreError> {
        let inner = self.lock();
        let mut sessions: Vec<SessionView> = inner
            .agents
            .get(agent)
            .into_iter()
            .flat_map(|data| &data.sessions)
            .flat_map(|(user, by_id)| {
                by_id
                    .iter()
                    .map(move |(id, s)| session_view(agent, user, id, s))
            })
            .collect();
        sessions.sort_by(|a, b| {
            (a.created_at, &a.user_id, &a.id).cmp(&(b.created_at, &b.user_id, &b.id))
        });
        Ok(sessions)
    }

    async fn task_ids(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        let inner = self.lock();
        let mut ids: Vec<String> = inner
            .agents
            .get(agent)
            .into_iter()
            .flat_map(|data| data.tasks.keys().cloned())
            .collect();
        ids.sort();
        Ok(ids)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}
