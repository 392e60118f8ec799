-- The session store's schema (src/sessions/sql.rs): one SQL text for SQLite and Postgres, so
-- TEXT and BIGINT only, and instants as BIGINT microseconds since the Unix epoch. Migrations
-- are forward-only: a change is a new file, never an edit of this one.
--
-- Every row carries its Agent (`namespace/name`), and every statement names it: no statement
-- reaches another Agent's data.

-- One row per Agent that keeps (or kept) anything: its counters, against the quotas. Every
-- write of the Agent first takes this row (an UPDATE, so that the writes of one Agent happen
-- one after the other, across processes), then charges it with a conditional UPDATE
-- (`... WHERE bytes + $n <= $max`) in the write's own transaction: no row updated means a quota
-- refused the write, which is rolled back.
CREATE TABLE hitl_agents (
    agent    TEXT   NOT NULL PRIMARY KEY,
    sessions BIGINT NOT NULL,
    events   BIGINT NOT NULL,
    tasks    BIGINT NOT NULL,
    bytes    BIGINT NOT NULL
);

-- A user's session of an Agent. `next_seq` is the sequence number its next new event takes,
-- read and advanced in the append's transaction; `events` and `bytes` are its counters against
-- the per-session quotas (bytes: its own and its events').
CREATE TABLE hitl_sessions (
    agent      TEXT   NOT NULL,
    user_id    TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    name       TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    next_seq   BIGINT NOT NULL,
    events     BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    PRIMARY KEY (agent, user_id, id)
);

-- The retention sweep's scan (sessions last written before an instant).
CREATE INDEX hitl_sessions_updated_at ON hitl_sessions (updated_at);

-- An event of a session, in the order of `seq`. An event re-sent with the same id is the same
-- row (the UNIQUE key): its data replaced, its `seq` and `created_at` kept.
CREATE TABLE hitl_events (
    agent      TEXT   NOT NULL,
    user_id    TEXT   NOT NULL,
    session_id TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    id         TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    data       TEXT   NOT NULL,
    PRIMARY KEY (agent, user_id, session_id, seq),
    UNIQUE (agent, user_id, session_id, id),
    FOREIGN KEY (agent, user_id, session_id)
        REFERENCES hitl_sessions (agent, user_id, id) ON DELETE CASCADE
);

-- An A2A task of an Agent, its JSON as the runtime sent it; `finished` is 1 when its state is
-- final (completed, canceled, failed, rejected).
CREATE TABLE hitl_tasks (
    agent      TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    finished   BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    json       TEXT   NOT NULL,
    PRIMARY KEY (agent, id)
);

CREATE INDEX hitl_tasks_updated_at ON hitl_tasks (updated_at);

-- The period each sweep was last claimed for: a claim is a conditional upsert, so one process
-- claims each period.
CREATE TABLE hitl_sweeps (
    name         TEXT   NOT NULL PRIMARY KEY,
    period_start BIGINT NOT NULL
);

-- When each Agent that keeps data was first found deleted (the grace period's start).
CREATE TABLE hitl_missing_agents (
    agent TEXT   NOT NULL PRIMARY KEY,
    since BIGINT NOT NULL
);
