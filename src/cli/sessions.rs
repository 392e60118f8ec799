//! `hitl-operator sessions`: the session store service, and `sessions copy`, which moves a
//! store to another database.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use jiff::SignedDuration;

use crate::api::common::parse_duration_seconds;
use crate::cli::logging::{self, LogFormat};
use crate::sessions::auth::SESSION_STORE_AUDIENCE;
use crate::sessions::http::Bounds;
use crate::sessions::retention::Retention;
use crate::sessions::server::{self, Database, Options};
use crate::sessions::sql::SqlStore;
use crate::sessions::store::Quotas;

/// Arguments of `hitl-operator sessions`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SessionsArgs {
    /// `copy`; without one, the store is served.
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
    /// How to serve.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// What `hitl-operator sessions` may do besides serving.
#[derive(clap::Subcommand, Debug)]
pub enum SessionsCommand {
    /// Copy every session, event and task of one database into another (e.g. SQLite to
    /// Postgres), with the store scaled to zero. Running it again is harmless.
    Copy(CopyArgs),
}

/// Arguments of `hitl-operator sessions copy`.
#[derive(clap::Args, Debug)]
pub struct CopyArgs {
    /// The database to copy from: `sqlite://PATH` or `postgres://...`.
    #[arg(long)]
    pub from: String,
    /// The database to copy into (created and migrated when new).
    #[arg(long)]
    pub to: String,
}

/// Arguments of the service.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address of kagent's session API.
    #[arg(long, default_value = "0.0.0.0:8083")]
    pub listen: SocketAddr,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    /// Where the data is kept: `sqlite://PATH`, `postgres://USER@HOST/DB`, or `memory:` (lost
    /// at every restart).
    #[arg(long, env = "HITL_SESSIONS_DATABASE", conflicts_with = "database_file", value_parser = Database::parse)]
    pub database: Option<Database>,
    /// A file holding the database's URL (a mounted Secret: the URL, with its password, never
    /// on the command line).
    #[arg(long)]
    pub database_file: Option<PathBuf>,
    /// Audience of the agent pods' projected tokens the store takes.
    #[arg(long, default_value = SESSION_STORE_AUDIENCE)]
    pub audience: String,
    /// Sessions one Agent may keep.
    #[arg(long, default_value_t = Quotas::default().sessions_per_agent)]
    pub max_sessions_per_agent: u64,
    /// Events one session may hold.
    #[arg(long, default_value_t = Quotas::default().events_per_session)]
    pub max_events_per_session: u64,
    /// Bytes one session may hold (a quantity: `32Mi`).
    #[arg(long, default_value = "32Mi", value_parser = parse_bytes)]
    pub max_bytes_per_session: u64,
    /// Bytes one Agent may keep, its sessions and tasks.
    #[arg(long, default_value = "1Gi", value_parser = parse_bytes)]
    pub max_bytes_per_agent: u64,
    /// Tasks one Agent may keep.
    #[arg(long, default_value_t = Quotas::default().tasks_per_agent)]
    pub max_tasks_per_agent: u64,
    /// Delete sessions and tasks not written for this long (a Go duration: `720h`). Off
    /// unless given.
    #[arg(long, value_parser = parse_duration)]
    pub idle_retention: Option<SignedDuration>,
    /// Delete the data of an Agent deleted this long ago.
    #[arg(long, default_value = "168h", value_parser = parse_duration)]
    pub deleted_agent_grace: SignedDuration,
    /// Time between retention sweeps (each runs once per such period across replicas).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub sweep_every: SignedDuration,
    /// Longest request body taken.
    #[arg(long, default_value = "8Mi", value_parser = parse_bytes)]
    pub max_body_bytes: u64,
    /// Bytes all requests together may hold in memory; more wait.
    #[arg(long, default_value = "64Mi", value_parser = parse_bytes)]
    pub max_in_flight_bytes: u64,
    /// Log format.
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        ignore_case = true,
        default_value = "json"
    )]
    pub log_format: LogFormat,
}

/// A byte quantity: a whole number, optionally with a Kubernetes binary suffix (`Ki`, `Mi`,
/// `Gi`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let (digits, shift) = match text.len().checked_sub(2).map(|i| text.split_at(i)) {
        Some((n, "Ki")) => (n, 10),
        Some((n, "Mi")) => (n, 20),
        Some((n, "Gi")) => (n, 30),
        _ => (text, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?}: a positive number of bytes, such as 1048576 or 32Mi"))
}

/// A Go duration (`30s`, `24h`), positive.
pub fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    parse_duration_seconds(text)
        .filter(|s| *s > 0.0)
        .map(SignedDuration::from_secs_f64)
        .ok_or_else(|| format!("{text:?}: a positive Go duration, such as 720h or 30m"))
}

impl ServeArgs {
    fn database(&self) -> crate::Result<Database> {
        match (&self.database, &self.database_file) {
            (Some(db), _) => Ok(db.clone()),
            (None, Some(path)) => {
                let url = std::fs::read_to_string(path).map_err(|source| crate::Error::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                Database::parse(&url).map_err(|why| crate::Error::Io {
                    path: path.display().to_string(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
                })
            }
            (None, None) => Err(crate::Error::Io {
                path: "--database".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "give --database (sqlite://PATH, postgres://..., memory:) or --database-file",
                ),
            }),
        }
    }

    fn options(&self) -> crate::Result<Options> {
        Ok(Options {
            listen: self.listen,
            health_listen: self.health_listen,
            database: self.database()?,
            audience: self.audience.clone(),
            quotas: Quotas {
                sessions_per_agent: self.max_sessions_per_agent,
                events_per_session: self.max_events_per_session,
                bytes_per_session: self.max_bytes_per_session,
                bytes_per_agent: self.max_bytes_per_agent,
                tasks_per_agent: self.max_tasks_per_agent,
            },
            bounds: Bounds {
                max_body_bytes: usize::try_from(self.max_body_bytes).unwrap_or(usize::MAX),
                max_in_flight_bytes: usize::try_from(self.max_in_flight_bytes)
                    .unwrap_or(usize::MAX),
            },
            retention: Retention {
                idle: self.idle_retention,
                deleted_agent_grace: self.deleted_agent_grace,
                every: Duration::try_from(self.sweep_every).unwrap_or(Duration::from_secs(600)),
            },
        })
    }
}

/// Runs `hitl-operator sessions`: the service, or `copy`.
pub async fn run(args: SessionsArgs) -> crate::Result<()> {
    crate::tls::install_provider();
    logging::init(args.serve.log_format);
    match args.command {
        None => server::run(args.serve.options()?).await,
        Some(SessionsCommand::Copy(copy)) => {
            // Quotas do not stop a copy: the target holds what the source held.
            let unbounded = Quotas {
                sessions_per_agent: u64::MAX,
                events_per_session: u64::MAX,
                bytes_per_session: u64::MAX,
                bytes_per_agent: u64::MAX,
                tasks_per_agent: u64::MAX,
            };
            let from = SqlStore::connect(&copy.from, unbounded).await?;
            let to = SqlStore::connect(&copy.to, unbounded).await?;
            let copied = crate::sessions::copy::copy(&from, &to).await?;
            println!(
                "copied {} agents: {} sessions, {} events, {} tasks",
                copied.agents, copied.sessions, copied.events, copied.tasks
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_quantities_take_binary_suffixes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("8Ki"), Ok(8 << 10));
        assert_eq!(parse_bytes("32Mi"), Ok(32 << 20));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        for bad in ["", "0", "Mi", "-1", "1.5Mi", "1MB", "1G"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_are_go_durations() {
        assert_eq!(parse_duration("24h"), Ok(SignedDuration::from_hours(24)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("1d").is_err());
    }
}
