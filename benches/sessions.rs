//! Benchmark: the session store's durable backends against the in-memory store, in one run.
//! Prints, for the in-memory store, SQLite (a file, WAL, `synchronous = FULL`) and a real
//! Postgres (Debian's `postgresql`, started by the test kit with its default settings, fsync
//! on):
//!
//! - event append p50/p99 (one writer appending 1 KB events to one session, each acknowledged
//!   before the next), and each as a multiple of the in-memory store's;
//! - reading a session of N events (all of them), p50, and as a multiple of the in-memory
//!   store's;
//! - disk bytes per 1000 events (SQLite: the database file; Postgres: `pg_total_relation_size`
//!   of the sessions and events tables), against the bytes the quotas count for them.
//!
//! Run: `cargo bench --bench sessions` (`SESSIONS_BENCH_APPENDS` sets the appends measured per
//! backend). Under `cargo test` it runs a few of each, to show it works.

use std::path::Path;
use std::time::{Duration, Instant};

use hitl_operator::sessions::memory::MemoryStore;
use hitl_operator::sessions::sql::SqlStore;
use hitl_operator::sessions::store::{AgentKey, EventQuery, Quotas, SessionStore};
use hitl_test_kit::postgres::Postgres;
use jiff::Timestamp;
use sqlx::{Connection, Row};

/// Figures of one backend.
struct Figures {
    append_p50: Duration,
    append_p99: Duration,
    /// p50 of a read of a session of each size of [`Sizes::reads`].
    reads: Vec<Duration>,
    /// Bytes the quotas count for everything the bench wrote (its sessions and events).
    counted: u64,
    /// Events the bench wrote, in all.
    events: u64,
}

/// How much to do.
struct Sizes {
    appends: usize,
    /// Sessions of these many events are read.
    reads: [usize; 2],
    /// Reads of each.
    repeats: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// An event as kagent's runtime writes one (an ADK event, about 1 KB).
fn event_data(n: usize) -> String {
    let text = "The quarterly numbers are in the shared folder; the summary follows. ".repeat(12);
    format!(
        r#"{{"id":"event-{n}","invocation_id":"e-5d2c","author":"helper","content":{{"role":"model","parts":[{{"text":"{text}"}}]}},"actions":{{"state_delta":{{}},"artifact_delta":{{}}}},"timestamp":1800000000.{n:06}}}"#
    )
}

fn agent() -> AgentKey {
    AgentKey::new("bench", "helper")
}

async fn measure<S: SessionStore>(store: &S, sizes: &Sizes) -> Figures {
    let a = agent();
    let now = Timestamp::now;
    store
        .create_session(&a, "alice", Some("warm-up"), None, now())
        .await
        .unwrap();
    for n in 0..50 {
        store
            .append_event(
                &a,
                "alice",
                "warm-up",
                &format!("w{n}"),
                &event_data(n),
                now(),
            )
            .await
            .unwrap();
    }
    store
        .create_session(&a, "alice", Some("appends"), None, now())
        .await
        .unwrap();
    let mut latencies = Vec::with_capacity(sizes.appends);
    for n in 0..sizes.appends {
        let data = event_data(n);
        let id = format!("event-{n}");
        let started = Instant::now();
        store
            .append_event(&a, "alice", "appends", &id, &data, now())
            .await
            .unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let mut reads = Vec::new();
    for size in sizes.reads {
        let session = format!("read-{size}");
        store
            .create_session(&a, "alice", Some(&session), None, now())
            .await
            .unwrap();
        for n in 0..size {
            store
                .append_event(
                    &a,
                    "alice",
                    &session,
                    &format!("r{n}"),
                    &event_data(n),
                    now(),
                )
                .await
                .unwrap();
        }
        let mut times = Vec::with_capacity(sizes.repeats);
        for _ in 0..sizes.repeats {
            let query = EventQuery {
                limit: -1,
                after: None,
            };
            let started = Instant::now();
            let (_, events) = store
                .get_session(&a, "alice", &session, query)
                .await
                .unwrap();
            times.push(started.elapsed());
            assert_eq!(events.len(), size);
        }
        times.sort();
        reads.push(percentile(&times, 0.5));
    }
    let after = store.usage(&a).await.unwrap();
    Figures {
        append_p50: percentile(&latencies, 0.5),
        append_p99: percentile(&latencies, 0.99),
        reads,
        counted: after.bytes,
        events: after.events,
    }
}

/// Bytes of the SQLite database at `path`, with its log.
fn sqlite_bytes(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).ok()
        })
        .map(|m| m.len())
        .sum()
}

/// Bytes Postgres holds for the session tables, with their indexes and TOAST.
async fn postgres_bytes(url: &str) -> u64 {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT CAST(pg_total_relation_size('hitl_events') \
         + pg_total_relation_size('hitl_sessions') AS BIGINT) AS bytes",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    u64::try_from(row.get::<i64, _>("bytes")).unwrap()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let appends = std::env::var("SESSIONS_BENCH_APPENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 2000 } else { 20 });
    let sizes = Sizes {
        appends,
        reads: if full { [100, 1000] } else { [5, 20] },
        repeats: if full { 50 } else { 3 },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Postgres::start();
    let (rows, disk) = rt.block_on(async {
        let unbounded = Quotas {
            events_per_session: u64::MAX,
            ..Quotas::default()
        };
        let memory = measure(&MemoryStore::new(unbounded), &sizes).await;

        let path = dir.path().join("sessions.db");
        let sqlite = SqlStore::connect(&format!("sqlite://{}", path.display()), unbounded)
            .await
            .unwrap();
        sqlite.close().await;
        let sqlite_empty = sqlite_bytes(&path);
        let sqlite = SqlStore::connect(&format!("sqlite://{}", path.display()), unbounded)
            .await
            .unwrap();
        let sqlite_figures = measure(&sqlite, &sizes).await;
        // Closing checkpoints the log into the file.
        sqlite.close().await;
        let sqlite_disk = sqlite_bytes(&path) - sqlite_empty;

        let url = server.create_database("bench");
        let postgres = SqlStore::connect(&url, unbounded).await.unwrap();
        let postgres_empty = postgres_bytes(&url).await;
        let postgres_figures = measure(&postgres, &sizes).await;
        postgres.close().await;
        let postgres_disk = postgres_bytes(&url).await - postgres_empty;
        (
            [
                ("memory", memory),
                ("sqlite", sqlite_figures),
                ("postgres", postgres_figures),
            ],
            [("sqlite", sqlite_disk), ("postgres", postgres_disk)],
        )
    });
    let base = &rows[0].1;

    println!(
        "event append: {} appends of ~{} B events to one session, one writer, each acknowledged",
        sizes.appends,
        event_data(0).len()
    );
    println!(
        "{:<10} {:>10} {:>10} {:>12} {:>12}",
        "backend", "p50 µs", "p99 µs", "p50/memory", "p99/memory"
    );
    for (name, f) in &rows {
        println!(
            "{name:<10} {:>10.1} {:>10.1} {:>11.1}x {:>11.1}x",
            us(f.append_p50),
            us(f.append_p99),
            us(f.append_p50) / us(base.append_p50),
            us(f.append_p99) / us(base.append_p99),
        );
    }
    for (i, size) in sizes.reads.iter().enumerate() {
        println!(
            "\nsession read: all {size} events of a session, {} reads",
            sizes.repeats
        );
        println!("{:<10} {:>10} {:>12}", "backend", "p50 µs", "p50/memory");
        for (name, f) in &rows {
            println!(
                "{name:<10} {:>10.1} {:>11.1}x",
                us(f.reads[i]),
                us(f.reads[i]) / us(base.reads[i]),
            );
        }
    }
    let events = base.events;
    let counted = base.counted as f64 / events as f64 * 1000.0;
    println!(
        "\ndisk per 1000 events ({events} events of ~{} B; the quotas count {:.0} KB per 1000)",
        event_data(0).len(),
        counted / 1000.0
    );
    println!("{:<10} {:>10} {:>16}", "backend", "KB", "disk/counted");
    for (name, bytes) in disk {
        let per_1000 = bytes as f64 / events as f64 * 1000.0;
        println!(
            "{name:<10} {:>10.0} {:>15.2}x",
            per_1000 / 1000.0,
            per_1000 / counted
        );
    }
}
