//! The durable session stores: SQLite (the default, a file on a volume) and Postgres (any
//! number of replicas), through sqlx's Any driver: one code path and one schema
//! (`migrations/sessions/`, embedded, forward-only), queries checked at run time.
//!
//! How the guarantees hold across processes, by construction:
//! - **Quotas.** Every write of an Agent runs in one transaction that first takes the Agent's
//!   row of `hitl_agents` (its counters), so the writes of one Agent happen one after the
//!   other on any number of replicas; it then charges the session's and the Agent's counters
//!   with conditional UPDATEs (`... WHERE bytes + $n <= $max`): no row updated means a quota
//!   refused the write, and the transaction is rolled back, so nothing of it is written.
//! - **Order.** An event's sequence number is the session row's `next_seq`, read and advanced by
//!   the same UPDATE in the append's transaction; never a timestamp.
//! - **Once.** An event is keyed by (Agent, user, session, event id): one re-sent is the same
//!   row, its data replaced, its place and `created_at` kept.
//! - **Sweeps.** A claim is a conditional upsert of the sweep's row: one claimer per period.
//! - **Migrations.** Run on start by sqlx's migrator, which on Postgres holds an advisory lock
//!   while it migrates: replicas starting together migrate once.
//!
//! SQLite is opened in WAL mode with `synchronous = FULL`: a write is acknowledged once its
//! transaction is in the log on disk, so it survives the process being killed (SIGKILL; WAL
//! with `NORMAL` would be enough for that) and the node losing power (which `NORMAL` is not).
//! SQLite takes one writer at a time: the writes of one process queue in order on a mutex,
//! and `busy_timeout` covers another process on the same file (one replica is the rule).
//!
//! A database that does not answer makes a statement fail with [`StoreError::Unavailable`]
//! (HTTP 503) within [`OPERATION_TIMEOUT`]; it never hangs a request.

use std::time::Duration;

use jiff::Timestamp;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyConnection, AnyPool, Connection, Executor, Row, Transaction};
use tokio::sync::{Mutex, MutexGuard};

use super::store::{
    AgentKey, EventQuery, EventView, Limit, Quotas, SessionStore, SessionView, StoreError,
    TaskRecord, Usage, check_id, event_bytes, new_session_id, session_bytes, task_bytes,
};

/// The schema's migrations, embedded at build time. (A new file there needs this file rebuilt:
/// touch it.)
static MIGRATIONS: Migrator = sqlx::migrate!("migrations/sessions");

/// The table where sqlx's migrator records what it applied: our own name, so that a database
/// shared with another sqlx application keeps the two apart.
const MIGRATIONS_TABLE: &str = "hitl_sessions_migrations";

/// The longest a statement (with the wait for a connection, or for SQLite's write lock) may
/// take before the store answers [`StoreError::Unavailable`].
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(15);

/// The longest opening the first connection may take (the migrations that follow may wait
/// longer: for another replica's migration).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a statement waits for a free connection of the pool.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The settings of each SQLite connection: WAL, every commit on disk before it is
/// acknowledged, foreign keys (events go with their session), and a wait for another
/// process's write lock.
const SQLITE_SETTINGS: &[&str] = &[
    "PRAGMA busy_timeout = 5000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA foreign_keys = ON",
];

/// The settings of each Postgres connection of the pool: the server ends a statement that runs
/// (or waits for a lock) longer than this. The migrations run on a connection of their own,
/// without it: a replica may wait there for another's migration.
const POSTGRES_SETTINGS: &[&str] = &["SET statement_timeout = 10000"];

/// Which database a [`SqlStore`] speaks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn of(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(StoreError::Unavailable(format!(
                "the session store's database URL must begin with sqlite:// or postgres://, not {:?}",
                url.split(':').next().unwrap_or_default()
            )))
        }
    }

    fn settings(self) -> &'static [&'static str] {
        match self {
            Self::Sqlite => SQLITE_SETTINGS,
            Self::Postgres => POSTGRES_SETTINGS,
        }
    }

    /// What begins a write's transaction: SQLite's `IMMEDIATE` takes the write lock at once
    /// (waiting for it by `busy_timeout`), rather than failing when a transaction that read
    /// first tries to write after another process wrote.
    fn begin(self) -> &'static str {
        match self {
            Self::Sqlite => "BEGIN IMMEDIATE",
            Self::Postgres => "BEGIN",
        }
    }

    fn max_connections(self) -> u32 {
        match self {
            // One writer at a time anyway; the rest read (WAL lets reads run beside a write).
            Self::Sqlite => 4,
            // Two replicas take 16 of a small Postgres's 100 connections.
            Self::Postgres => 8,
        }
    }
}

/// The URL sqlx opens: a SQLite file is created when missing, unless the URL sets a `mode`.
fn connect_url(url: &str, backend: Backend) -> String {
    match backend {
        Backend::Sqlite if !url.contains("mode=") => {
            let sep = if url.contains('?') { '&' } else { '?' };
            format!("{url}{sep}mode=rwc")
        }
        _ => url.to_owned(),
    }
}

/// `url` without its password and its parameters (which may hold one), for messages.
fn redacted(url: &str) -> String {
    let url = url.split('?').next().unwrap_or_default();
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

async fn apply(conn: &mut AnyConnection, settings: &[&'static str]) -> Result<(), sqlx::Error> {
    for setting in settings {
        conn.execute(*setting).await?;
    }
    Ok(())
}

/// A database error as the store's: the database did not answer or failed.
fn db(what: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError::Unavailable(format!("{what}: {e}"))
}

/// A quota as a BIGINT.
fn cap(quota: u64) -> i64 {
    i64::try_from(quota).unwrap_or(i64::MAX)
}

fn micros(at: Timestamp) -> i64 {
    at.as_microsecond()
}

fn instant(micros: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_microsecond(micros).map_err(|e| {
        StoreError::Unavailable(format!(
            "a stored instant ({micros} µs) is out of range: {e}"
        ))
    })
}

/// A counter or byte count as stored (never negative).
fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

fn get<'r, T>(row: &'r AnyRow, column: &'static str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    row.try_get(column)
        .map_err(|e| StoreError::Unavailable(format!("reading column {column}: {e}")))
}

/// An Agent's counters, as read when its row is taken.
#[derive(Clone, Copy, Debug)]
struct Counters {
    sessions: i64,
    tasks: i64,
}

/// A change to an Agent's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Charge {
    sessions: i64,
    events: i64,
    tasks: i64,
    bytes: i64,
}

/// Takes `agent`'s counters row for the rest of the transaction (creating it when missing):
/// the writes of one Agent happen one after the other, across processes. An upsert, so that a
/// row deleted meanwhile (`forget_agent`, `delete_idle`) is created again rather than missed.
async fn lock_agent(conn: &mut AnyConnection, agent: &str) -> Result<Counters, StoreError> {
    let row = sqlx::query(
        "INSERT INTO hitl_agents (agent, sessions, events, tasks, bytes) \
         VALUES ($1, 0, 0, 0, 0) \
         ON CONFLICT (agent) DO UPDATE SET sessions = hitl_agents.sessions \
         RETURNING sessions, tasks",
    )
    .bind(agent)
    .fetch_one(&mut *conn)
    .await
    .map_err(db("taking the agent's counters"))?;
    Ok(Counters {
        sessions: get(&row, "sessions")?,
        tasks: get(&row, "tasks")?,
    })
}

/// Applies `charge` to `agent`'s counters unless it would take them past `quotas`; whether it
/// did. A change that does not grow a counter always applies.
async fn charge(
    conn: &mut AnyConnection,
    agent: &str,
    charge: Charge,
    quotas: &Quotas,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "UPDATE hitl_agents SET sessions = sessions + $2, events = events + $3, \
         tasks = tasks + $4, bytes = bytes + $5 \
         WHERE agent = $1 AND ($2 <= 0 OR sessions + $2 <= $6) \
         AND ($4 <= 0 OR tasks + $4 <= $7) AND ($5 <= 0 OR bytes + $5 <= $8)",
    )
    .bind(agent)
    .bind(charge.sessions)
    .bind(charge.events)
    .bind(charge.tasks)
    .bind(charge.bytes)
    .bind(cap(quotas.sessions_per_agent))
    .bind(cap(quotas.tasks_per_agent))
    .bind(cap(quotas.bytes_per_agent))
    .execute(&mut *conn)
    .await
    .map_err(db("charging the agent's counters"))?;
    Ok(done.rows_affected() == 1)
}

/// The durable session store over SQLite or Postgres. See the module's documentation.
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    quotas: Quotas,
    /// SQLite's one writer at a time: this process's writes queue here, in order, rather than
    /// polling SQLite's busy handler. `None` on Postgres, whose row locks order the writes.
    writer: Option<Mutex<()>>,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &self.backend)
            .field("quotas", &self.quotas)
            .finish_non_exhaustive()
    }
}

/// A write's transaction, and this process's turn to write (SQLite).
struct Write<'a> {
    tx: Transaction<'static, Any>,
    _turn: Option<MutexGuard<'a, ()>>,
}

impl SqlStore {
    /// Opens the database at `url`, brings its schema up to date, and bounds the writes of the
    /// store by `quotas`: `sqlite://PATH` (the file is created when missing; its directory must
    /// exist) or `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (the database must exist).
    pub async fn connect(url: &str, quotas: Quotas) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = Backend::of(url)?;
        let url = connect_url(url, backend);
        let shown = redacted(&url);
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("{what} {shown}: {e}"))
        };
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, AnyConnection::connect(&url))
            .await
            .map_err(|_| {
                let waited = format!("no answer within {} s", CONNECT_TIMEOUT.as_secs());
                fail("cannot open", &waited)
            })?
            .map_err(|e| fail("cannot open", &e))?;
        if backend == Backend::Sqlite {
            apply(&mut conn, SQLITE_SETTINGS)
                .await
                .map_err(|e| fail("cannot set up", &e))?;
        }
        let mut migrator = Migrator::with_migrations(MIGRATIONS.iter().cloned().collect());
        migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
        migrator
            .run(&mut conn)
            .await
            .map_err(|e| fail("cannot migrate the schema of", &e))?;
        conn.close()
            .await
            .map_err(|e| fail("cannot close the migration's connection to", &e))?;
        let pool = AnyPoolOptions::new()
            .max_connections(backend.max_connections())
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(300)))
            .after_connect(move |conn, _| Box::pin(apply(conn, backend.settings())))
            .connect(&url)
            .await
            .map_err(|e| fail("cannot open", &e))?;
        Ok(Self {
            pool,
            backend,
            quotas,
            writer: (backend == Backend::Sqlite).then(|| Mutex::new(())),
        })
    }

    /// `"sqlite"` or `"postgres"`: which database the store keeps its data in.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Closes every connection, waiting for those in use to come back (SQLite: the last one
    /// checkpoints the log into the database file).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Begins a write: this process's turn (SQLite), then the transaction.
    async fn write(&self) -> Result<Write<'_>, StoreError> {
        let turn = match &self.writer {
            Some(writer) => Some(writer.lock().await),
            None => None,
        };
        let tx = self
            .pool
            .begin_with(self.backend.begin())
            .await
            .map_err(db("beginning a write"))?;
        Ok(Write { tx, _turn: turn })
    }

    /// Runs `op` within [`OPERATION_TIMEOUT`].
    async fn timed<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(OPERATION_TIMEOUT, op).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "{what}: the {} database did not answer within {} s",
                self.backend_name(),
                OPERATION_TIMEOUT.as_secs()
            ))),
        }
    }

    fn refuse(&self, limit: Limit, what: &str) -> StoreError {
        StoreError::limit(limit, &self.quotas, what)
    }

    /// The refusal of `charge` to `agent`'s counters (as they were when taken).
    fn agent_refusal(&self, agent: &AgentKey, counters: Counters, charge: Charge) -> StoreError {
        let q = &self.quotas;
        if charge.sessions > 0 && counters.sessions + charge.sessions > cap(q.sessions_per_agent) {
            self.refuse(
                Limit::SessionsPerAgent,
                &format!("agent {agent} keeps {} sessions", counters.sessions),
            )
        } else if charge.tasks > 0 && counters.tasks + charge.tasks > cap(q.tasks_per_agent) {
            self.refuse(
                Limit::TasksPerAgent,
                &format!("agent {agent} keeps {} tasks", counters.tasks),
            )
        } else {
            self.refuse(
                Limit::BytesPerAgent,
                &format!("agent {agent} would grow past it"),
            )
        }
    }

    async fn create(
        &self,
        agent: &AgentKey,
        user: &str,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionView, StoreError> {
        let id = new_session_id(user, id, name)?;
        let key = agent.key();
        let now = micros(now);
        let new_bytes = session_bytes(user, &id, name) as i64;
        let mut w = self.write().await?;
        let counters = lock_agent(&mut w.tx, &key).await?;
        let old = sqlx::query(
            "SELECT name FROM hitl_sessions WHERE agent = $1 AND user_id = $2 AND id = $3",
        )
        .bind(&key)
        .bind(user)
        .bind(&id)
        .fetch_optional(&mut *w.tx)
        .await
        .map_err(db("reading the session"))?;
        let created_at = match old {
            Some(old) => {
                let old_name: Option<String> = get(&old, "name")?;
                let grow = new_bytes - session_bytes(user, &id, old_name.as_deref()) as i64;
                let row = sqlx::query(
                    "UPDATE hitl_sessions SET name = $4, updated_at = $5, bytes = bytes + $6 \
                     WHERE agent = $1 AND user_id = $2 AND id = $3 \
                     AND ($6 <= 0 OR bytes + $6 <= $7) RETURNING created_at",
                )
                .bind(&key)
                .bind(user)
                .bind(&id)
                .bind(name)
                .bind(now)
                .bind(grow)
                .bind(cap(self.quotas.bytes_per_session))
                .fetch_optional(&mut *w.tx)
                .await
                .map_err(db("renaming the session"))?;
                let Some(row) = row else {
                    return Err(self.refuse(
                        Limit::BytesPerSession,
                        &format!("session {id} would grow past it with its new name"),
                    ));
                };
                let change = Charge {
                    bytes: grow,
                    ..Charge::default()
                };
                if !charge(&mut w.tx, &key, change, &self.quotas).await? {
                    return Err(self.agent_refusal(agent, counters, change));
                }
                get(&row, "created_at")?
            }
            None => {
                if new_bytes > cap(self.quotas.bytes_per_session) {
                    return Err(self.refuse(
                        Limit::BytesPerSession,
                        &format!("a new session {id} is larger"),
                    ));
                }
                let change = Charge {
                    sessions: 1,
                    bytes: new_bytes,
                    ..Charge::default()
                };
                if !charge(&mut w.tx, &key, change, &self.quotas).await? {
                    return Err(self.agent_refusal(agent, counters, change));
                }
                sqlx::query(
                    "INSERT INTO hitl_sessions \
                     (agent, user_id, id, name, created_at, updated_at, next_seq, events, bytes) \
                     VALUES ($1, $2, $3, $4, $5, $5, 0, 0, $6)",
                )
                .bind(&key)
                .bind(user)
                .bind(&id)
                .bind(name)
                .bind(now)
                .bind(new_bytes)
                .execute(&mut *w.tx)
                .await
                .map_err(db("creating the session"))?;
                now
            }
        };
        w.tx.commit().await.map_err(db("committing the session"))?;
        Ok(SessionView {
            id,
            name: name.map(str::to_owned),
            user_id: user.to_owned(),
            created_at: instant(created_at)?,
            updated_at: instant(now)?,
            deleted_at: (),
            agent_id: agent.kagent_id(),
        })
    }

    async fn append(
        &self,
        agent: &AgentKey,
        user: &str,
        session: &str,
        event_id: &str,
        data: &str,
        now: Timestamp,
    ) -> Result<EventView, StoreError> {
        check_id("event id", event_id)?;
        let key = agent.key();
        let now = micros(now);
        let bytes = event_bytes(event_id, data) as i64;
        let mut w = self.write().await?;
        let counters = lock_agent(&mut w.tx, &key).await?;
        // The session, and the event of that id when it holds one.
        let row = sqlx::query(
            "SELECT s.events, e.created_at, e.bytes FROM hitl_sessions s \
             LEFT JOIN hitl_events e ON e.agent = s.agent AND e.user_id = s.user_id \
             AND e.session_id = s.id AND e.id = $4 \
             WHERE s.agent = $1 AND s.user_id = $2 AND s.id = $3",
        )
        .bind(&key)
        .bind(user)
        .bind(session)
        .bind(event_id)
        .fetch_optional(&mut *w.tx)
        .await
        .map_err(db("reading the session"))?;
        let Some(row) = row else {
            return Err(StoreError::session_not_found());
        };
        let events: i64 = get(&row, "events")?;
        let old = match (
            get::<Option<i64>>(&row, "created_at")?,
            get::<Option<i64>>(&row, "bytes")?,
        ) {
            (Some(created_at), Some(bytes)) => Some((created_at, bytes)),
            _ => None,
        };
        let (new_events, grow) = match old {
            Some((_, old_bytes)) => (0i64, bytes - old_bytes),
            None => (1, bytes),
        };
        let advanced = sqlx::query(
            "UPDATE hitl_sessions SET next_seq = next_seq + $4, events = events + $4, \
             bytes = bytes + $5, updated_at = $6 \
             WHERE agent = $1 AND user_id = $2 AND id = $3 \
             AND ($4 <= 0 OR events + $4 <= $7) AND ($5 <= 0 OR bytes + $5 <= $8) \
             RETURNING next_seq",
        )
        .bind(&key)
        .bind(user)
        .bind(session)
        .bind(new_events)
        .bind(grow)
        .bind(now)
        .bind(cap(self.quotas.events_per_session))
        .bind(cap(self.quotas.bytes_per_session))
        .fetch_optional(&mut *w.tx)
        .await
        .map_err(db("charging the session"))?;
        let Some(advanced) = advanced else {
            return Err(
                if new_events > 0 && events + 1 > cap(self.quotas.events_per_session) {
                    self.refuse(
                        Limit::EventsPerSession,
                        &format!("session {session} holds {events} events"),
                    )
                } else {
                    self.refuse(
                        Limit::BytesPerSession,
                        &format!("session {session} would grow past it with event {event_id}"),
                    )
                },
            );
        };
        let change = Charge {
            events: new_events,
            bytes: grow,
            ..Charge::default()
        };
        if !charge(&mut w.tx, &key, change, &self.quotas).await? {
            return Err(self.agent_refusal(agent, counters, change));
        }
        let created_at = match old {
            Some((created_at, _)) => {
                sqlx::query(
                    "UPDATE hitl_events SET data = $5, bytes = $6, updated_at = $7 \
                     WHERE agent = $1 AND user_id = $2 AND session_id = $3 AND id = $4",
                )
                .bind(&key)
                .bind(user)
                .bind(session)
                .bind(event_id)
                .bind(data)
                .bind(bytes)
                .bind(now)
                .execute(&mut *w.tx)
                .await
                .map_err(db("replacing the event"))?;
                created_at
            }
            None => {
                let seq: i64 = get::<i64>(&advanced, "next_seq")? - 1;
                sqlx::query(
                    "INSERT INTO hitl_events \
                     (agent, user_id, session_id, seq, id, created_at, updated_at, bytes, data) \
                     VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)",
                )
                .bind(&key)
                .bind(user)
                .bind(session)
                .bind(seq)
                .bind(event_id)
                .bind(now)
                .bind(bytes)
                .bind(data)
                .execute(&mut *w.tx)
                .await
                .map_err(db("storing the event"))?;
                now
            }
        };
        w.tx.commit().await.map_err(db("committing the event"))?;
        Ok(EventView {
            id: event_id.to_owned(),
            session_id: session.to_owned(),
            user_id: user.to_owned(),
            created_at: instant(created_at)?,
            updated_at: instant(now)?,
            deleted_at: (),
            data: data.to_owned(),
        })
    }

    async fn save(
        &self,
        agent: &AgentKey,
        task: &TaskRecord,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        check_id("task id", &task.id)?;
        let key = agent.key();
        let now = micros(now);
        let bytes = task_bytes(task) as i64;
        let mut w = self.write().await?;
        let counters = lock_agent(&mut w.tx, &key).await?;
        let old = sqlx::query("SELECT bytes FROM hitl_tasks WHERE agent = $1 AND id = $2")
            .bind(&key)
            .bind(&task.id)
            .fetch_optional(&mut *w.tx)
            .await
            .map_err(db("reading the task"))?;
        let old: Option<i64> = match old {
            Some(row) => Some(get(&row, "bytes")?),
            None => None,
        };
        let change = Charge {
            tasks: i64::from(old.is_none()),
            bytes: bytes - old.unwrap_or(0),
            ..Charge::default()
        };
        if !charge(&mut w.tx, &key, change, &self.quotas).await? {
            return Err(self.agent_refusal(agent, counters, change));
        }
        sqlx::query(
            "INSERT INTO hitl_tasks (agent, id, finished, created_at, updated_at, bytes, json) \
             VALUES ($1, $2, $3, $4, $4, $5, $6) \
             ON CONFLICT (agent, id) DO UPDATE SET finished = excluded.finished, \
             updated_at = excluded.updated_at, bytes = excluded.bytes, json = excluded.json",
        )
        .bind(&key)
        .bind(&task.id)
        .bind(i64::from(task.finished))
        .bind(now)
        .bind(bytes)
        .bind(&task.json)
        .execute(&mut *w.tx)
        .await
        .map_err(db("storing the task"))?;
        w.tx.commit().await.map_err(db("committing the task"))
    }

    async fn delete_one_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        let key = agent.key();
        let mut w = self.write().await?;
        lock_agent(&mut w.tx, &key).await?;
        let gone = sqlx::query(
            "DELETE FROM hitl_sessions WHERE agent = $1 AND user_id = $2 AND id = $3 \
             RETURNING events, bytes",
        )
        .bind(&key)
        .bind(user)
        .bind(id)
        .fetch_optional(&mut *w.tx)
        .await
        .map_err(db("deleting the session"))?;
        // Nothing to delete: the transaction is rolled back (it wrote only the counters row).
        let Some(row) = gone else {
            return Ok(());
        };
        let change = Charge {
            sessions: -1,
            events: -get::<i64>(&row, "events")?,
            bytes: -get::<i64>(&row, "bytes")?,
            ..Charge::default()
        };
        charge(&mut w.tx, &key, change, &self.quotas).await?;
        w.tx.commit().await.map_err(db("committing the deletion"))
    }

    async fn delete_one_task(&self, agent: &AgentKey, id: &str) -> Result<(), StoreError> {
        let key = agent.key();
        let mut w = self.write().await?;
        lock_agent(&mut w.tx, &key).await?;
        let gone =
            sqlx::query("DELETE FROM hitl_tasks WHERE agent = $1 AND id = $2 RETURNING bytes")
                .bind(&key)
                .bind(id)
                .fetch_optional(&mut *w.tx)
                .await
                .map_err(db("deleting the task"))?;
        // Nothing to delete: the transaction is rolled back (it wrote only the counters row).
        let Some(row) = gone else {
            return Ok(());
        };
        let change = Charge {
            tasks: -1,
            bytes: -get::<i64>(&row, "bytes")?,
            ..Charge::default()
        };
        charge(&mut w.tx, &key, change, &self.quotas).await?;
        w.tx.commit().await.map_err(db("committing the deletion"))
    }

    async fn forget(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        let key = agent.key();
        let mut w = self.write().await?;
        lock_agent(&mut w.tx, &key).await?;
        let mut gone = 0;
        for (statement, counted) in [
            ("DELETE FROM hitl_events WHERE agent = $1", false),
            ("DELETE FROM hitl_sessions WHERE agent = $1", true),
            ("DELETE FROM hitl_tasks WHERE agent = $1", true),
            ("DELETE FROM hitl_agents WHERE agent = $1", false),
            ("DELETE FROM hitl_missing_agents WHERE agent = $1", false),
        ] {
            let done = sqlx::query(statement)
                .bind(&key)
                .execute(&mut *w.tx)
                .await
                .map_err(db("forgetting the agent"))?;
            if counted {
                gone += done.rows_affected();
            }
        }
        w.tx.commit().await.map_err(db("committing the deletion"))?;
        Ok(gone)
    }

    async fn delete_idle_of(&self, key: &str, before: i64) -> Result<u64, StoreError> {
        let mut w = self.write().await?;
        lock_agent(&mut w.tx, key).await?;
        let sessions = sqlx::query(
            "DELETE FROM hitl_sessions WHERE agent = $1 AND updated_at < $2 RETURNING events, bytes",
        )
        .bind(key)
        .bind(before)
        .fetch_all(&mut *w.tx)
        .await
        .map_err(db("deleting idle sessions"))?;
        let tasks = sqlx::query(
            "DELETE FROM hitl_tasks WHERE agent = $1 AND updated_at < $2 RETURNING bytes",
        )
        .bind(key)
        .bind(before)
        .fetch_all(&mut *w.tx)
        .await
        .map_err(db("deleting idle tasks"))?;
        let mut change = Charge {
            sessions: -(sessions.len() as i64),
            tasks: -(tasks.len() as i64),
            ..Charge::default()
        };
        for row in &sessions {
            change.events -= get::<i64>(row, "events")?;
            change.bytes -= get::<i64>(row, "bytes")?;
        }
        for row in &tasks {
            change.bytes -= get::<i64>(row, "bytes")?;
        }
        charge(&mut w.tx, key, change, &self.quotas).await?;
        sqlx::query("DELETE FROM hitl_agents WHERE agent = $1 AND sessions = 0 AND tasks = 0")
            .bind(key)
            .execute(&mut *w.tx)
            .await
            .map_err(db("deleting the agent's counters"))?;
        w.tx.commit().await.map_err(db("committing the deletion"))?;
        Ok((sessions.len() + tasks.len()) as u64)
    }

    async fn delete_idle_all(&self, before: Timestamp) -> Result<u64, StoreError> {
        let before = micros(before);
        let agents = sqlx::query(
            "SELECT agent FROM hitl_sessions WHERE updated_at < $1 \
             UNION SELECT agent FROM hitl_tasks WHERE updated_at < $1",
        )
        .bind(before)
        .fetch_all(&self.pool)
        .await
        .map_err(db("finding idle sessions"))?;
        let mut gone = 0;
        for row in &agents {
            let key: String = get(row, "agent")?;
            gone += self.delete_idle_of(&key, before).await?;
        }
        Ok(gone)
    }

    async fn read_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
        query: EventQuery,
    ) -> Result<(SessionView, Vec<EventView>), StoreError> {
        let key = agent.key();
        let row = sqlx::query(
            "SELECT name, created_at, updated_at FROM hitl_sessions \
             WHERE agent = $1 AND user_id = $2 AND id = $3",
        )
        .bind(&key)
        .bind(user)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("reading the session"))?;
        let Some(row) = row else {
            return Err(StoreError::session_not_found());
        };
        let session = SessionView {
            id: id.to_owned(),
            name: get(&row, "name")?,
            user_id: user.to_owned(),
            created_at: instant(get(&row, "created_at")?)?,
            updated_at: instant(get(&row, "updated_at")?)?,
            deleted_at: (),
            agent_id: agent.kagent_id(),
        };
        // The last `limit` (all when not above 0), newest first, then turned around.
        let limit = if query.limit > 0 {
            query.limit
        } else {
            i64::MAX
        };
        let rows = sqlx::query(
            "SELECT id, created_at, updated_at, data FROM hitl_events \
             WHERE agent = $1 AND user_id = $2 AND session_id = $3 AND created_at > $4 \
             ORDER BY seq DESC LIMIT $5",
        )
        .bind(&key)
        .bind(user)
        .bind(id)
        .bind(query.after.map_or(i64::MIN, micros))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading the session's events"))?;
        let mut events = rows
            .iter()
            .map(|row| {
                Ok(EventView {
                    id: get(row, "id")?,
                    session_id: id.to_owned(),
                    user_id: user.to_owned(),
                    created_at: instant(get(row, "created_at")?)?,
                    updated_at: instant(get(row, "updated_at")?)?,
                    deleted_at: (),
                    data: get(row, "data")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        events.reverse();
        Ok((session, events))
    }

    async fn sessions_of(
        &self,
        agent: &AgentKey,
        user: Option<&str>,
    ) -> Result<Vec<SessionView>, StoreError> {
        let key = agent.key();
        let rows = match user {
            Some(user) => sqlx::query(
                "SELECT user_id, id, name, created_at, updated_at FROM hitl_sessions \
                 WHERE agent = $1 AND user_id = $2 ORDER BY created_at, id",
            )
            .bind(&key)
            .bind(user),
            None => sqlx::query(
                "SELECT user_id, id, name, created_at, updated_at FROM hitl_sessions \
                 WHERE agent = $1 ORDER BY created_at, user_id, id",
            )
            .bind(&key),
        }
        .fetch_all(&self.pool)
        .await
        .map_err(db("listing sessions"))?;
        rows.iter()
            .map(|row| {
                Ok(SessionView {
                    id: get(row, "id")?,
                    name: get(row, "name")?,
                    user_id: get(row, "user_id")?,
                    created_at: instant(get(row, "created_at")?)?,
                    updated_at: instant(get(row, "updated_at")?)?,
                    deleted_at: (),
                    agent_id: agent.kagent_id(),
                })
            })
            .collect()
    }
}

impl SessionStore for SqlStore {
    async fn create_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: Option<&str>,
        name: Option<&str>,
        now: Timestamp,
    ) -> Result<SessionView, StoreError> {
        self.timed(
            "creating a session",
            self.create(agent, user, id, name, now),
        )
        .await
    }

    async fn list_sessions(
        &self,
        agent: &AgentKey,
        user: &str,
    ) -> Result<Vec<SessionView>, StoreError> {
        self.timed("listing sessions", self.sessions_of(agent, Some(user)))
            .await
    }

    async fn session_size(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> Result<Option<u64>, StoreError> {
        self.timed("reading a session's size", async {
            let row = sqlx::query(
                "SELECT bytes FROM hitl_sessions WHERE agent = $1 AND user_id = $2 AND id = $3",
            )
            .bind(agent.key())
            .bind(user)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("reading the session's size"))?;
            match row {
                Some(row) => Ok(Some(count(get(&row, "bytes")?))),
                None => Ok(None),
            }
        })
        .await
    }

    async fn get_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
        query: EventQuery,
    ) -> Result<(SessionView, Vec<EventView>), StoreError> {
        self.timed(
            "reading a session",
            self.read_session(agent, user, id, query),
        )
        .await
    }

    async fn delete_session(
        &self,
        agent: &AgentKey,
        user: &str,
        id: &str,
    ) -> Result<(), StoreError> {
        self.timed(
            "deleting a session",
            self.delete_one_session(agent, user, id),
        )
        .await
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
        self.timed(
            "storing an event",
            self.append(agent, user, session, event_id, data, now),
        )
        .await
    }

    async fn save_task(
        &self,
        agent: &AgentKey,
        task: &TaskRecord,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.timed("storing a task", self.save(agent, task, now))
            .await
    }

    async fn get_task(&self, agent: &AgentKey, id: &str) -> Result<Option<String>, StoreError> {
        self.timed("reading a task", async {
            let row = sqlx::query("SELECT json FROM hitl_tasks WHERE agent = $1 AND id = $2")
                .bind(agent.key())
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db("reading the task"))?;
            match row {
                Some(row) => Ok(Some(get(&row, "json")?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn delete_task(&self, agent: &AgentKey, id: &str) -> Result<(), StoreError> {
        self.timed("deleting a task", self.delete_one_task(agent, id))
            .await
    }

    async fn usage(&self, agent: &AgentKey) -> Result<Usage, StoreError> {
        self.timed("reading an agent's usage", async {
            let row = sqlx::query(
                "SELECT sessions, events, tasks, bytes FROM hitl_agents WHERE agent = $1",
            )
            .bind(agent.key())
            .fetch_optional(&self.pool)
            .await
            .map_err(db("reading the agent's counters"))?;
            match row {
                Some(row) => Ok(Usage {
                    sessions: count(get(&row, "sessions")?),
                    events: count(get(&row, "events")?),
                    tasks: count(get(&row, "tasks")?),
                    bytes: count(get(&row, "bytes")?),
                }),
                None => Ok(Usage::default()),
            }
        })
        .await
    }

    async fn agents(&self) -> Result<Vec<AgentKey>, StoreError> {
        self.timed("listing agents", async {
            let rows = sqlx::query(
                "SELECT agent FROM hitl_agents WHERE sessions > 0 OR tasks > 0 ORDER BY agent",
            )
            .fetch_all(&self.pool)
            .await
            .map_err(db("listing agents"))?;
            rows.iter()
                .map(|row| {
                    let key: String = get(row, "agent")?;
                    AgentKey::from_key(&key).ok_or_else(|| {
                        StoreError::Unavailable(format!("a stored agent key {key:?} has no /"))
                    })
                })
                .collect()
        })
        .await
    }

    async fn forget_agent(&self, agent: &AgentKey) -> Result<u64, StoreError> {
        self.timed("forgetting an agent", self.forget(agent)).await
    }

    async fn delete_idle(&self, before: Timestamp) -> Result<u64, StoreError> {
        self.timed("deleting idle sessions", self.delete_idle_all(before))
            .await
    }

    async fn claim_sweep(&self, sweep: &str, period_start: Timestamp) -> Result<bool, StoreError> {
        self.timed("claiming a sweep", async {
            let row = sqlx::query(
                "INSERT INTO hitl_sweeps (name, period_start) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE SET period_start = excluded.period_start \
                 WHERE hitl_sweeps.period_start < excluded.period_start \
                 RETURNING name",
            )
            .bind(sweep)
            .bind(micros(period_start))
            .fetch_optional(&self.pool)
            .await
            .map_err(db("claiming the sweep"))?;
            Ok(row.is_some())
        })
        .await
    }

    async fn note_missing(
        &self,
        agent: &AgentKey,
        now: Timestamp,
    ) -> Result<Timestamp, StoreError> {
        self.timed("noting a deleted agent", async {
            let row = sqlx::query(
                "INSERT INTO hitl_missing_agents (agent, since) VALUES ($1, $2) \
                 ON CONFLICT (agent) DO UPDATE SET since = CASE \
                 WHEN excluded.since < hitl_missing_agents.since THEN excluded.since \
                 ELSE hitl_missing_agents.since END \
                 RETURNING since",
            )
            .bind(agent.key())
            .bind(micros(now))
            .fetch_one(&self.pool)
            .await
            .map_err(db("noting the deleted agent"))?;
            instant(get(&row, "since")?)
        })
        .await
    }

    async fn note_present(&self, agent: &AgentKey) -> Result<(), StoreError> {
        self.timed("noting an agent present", async {
            sqlx::query("DELETE FROM hitl_missing_agents WHERE agent = $1")
                .bind(agent.key())
                .execute(&self.pool)
                .await
                .map_err(db("noting the agent present"))?;
            Ok(())
        })
        .await
    }

    async fn all_sessions(&self, agent: &AgentKey) -> Result<Vec<SessionView>, StoreError> {
        self.timed("listing sessions", self.sessions_of(agent, None))
            .await
    }

    async fn task_ids(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        self.timed("listing tasks", async {
            let rows = sqlx::query("SELECT id FROM hitl_tasks WHERE agent = $1 ORDER BY id")
                .bind(agent.key())
                .fetch_all(&self.pool)
                .await
                .map_err(db("listing tasks"))?;
            rows.iter().map(|row| get(row, "id")).collect()
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", async {
            sqlx::query("SELECT 1")
                .execute(&self.pool)
                .await
                .map_err(db("ping"))?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_file_is_created_when_missing_unless_the_url_says_otherwise() {
        let sqlite = Backend::Sqlite;
        assert_eq!(
            connect_url("sqlite:///data/s.db", sqlite),
            "sqlite:///data/s.db?mode=rwc"
        );
        assert_eq!(
            connect_url("sqlite:///data/s.db?cache=private", sqlite),
            "sqlite:///data/s.db?cache=private&mode=rwc"
        );
        assert_eq!(
            connect_url("sqlite:///data/s.db?mode=ro", sqlite),
            "sqlite:///data/s.db?mode=ro"
        );
        assert_eq!(
            connect_url("postgres://u@h/db", Backend::Postgres),
            "postgres://u@h/db"
        );
    }

    #[test]
    fn only_sqlite_and_postgres_urls_are_taken() {
        assert_eq!(Backend::of("sqlite:///s.db"), Ok(Backend::Sqlite));
        assert_eq!(Backend::of("postgres://h/db"), Ok(Backend::Postgres));
        assert_eq!(Backend::of("postgresql://h/db"), Ok(Backend::Postgres));
        let Err(StoreError::Unavailable(message)) = Backend::of("mysql://root:pw@h/db") else {
            panic!("a mysql URL was taken");
        };
        assert!(message.contains("\"mysql\""), "{message}");
        assert!(!message.contains("pw"), "{message}");
    }

    #[test]
    fn messages_never_show_the_password() {
        assert_eq!(
            redacted("postgres://app:s3cr%40t@db.example:5432/sessions"),
            "postgres://app@db.example:5432/sessions"
        );
        assert_eq!(
            redacted("postgres://app@db/sessions"),
            "postgres://app@db/sessions"
        );
        assert_eq!(
            redacted("postgres://app@db/sessions?sslmode=require&password=s3cret"),
            "postgres://app@db/sessions"
        );
        assert_eq!(
            redacted("sqlite:///data/s.db?mode=rwc"),
            "sqlite:///data/s.db"
        );
    }

    #[test]
    fn quotas_past_a_bigint_are_the_largest_bigint() {
        assert_eq!(cap(u64::MAX), i64::MAX);
        assert_eq!(cap(10), 10);
    }
}
