//! A real Postgres for tests: Debian's `postgresql` binaries, a throwaway cluster started by
//! the test itself and stopped when it is dropped.
//!
//! [`Postgres::start`] makes a fresh directory under the system's temporary directory, runs
//! `initdb` there (as the `postgres` user when the test runs as root, since `initdb` refuses
//! root), and starts the server on 127.0.0.1 at a free port with its unix socket in that
//! directory and `trust` authentication (for local tests only). [`Postgres::create_database`]
//! gives each test a database of its own. Dropping the value stops the server
//! (`pg_ctl stop -m immediate`) and removes the directory. [`Postgres::shared`] hands one
//! server to every test of a test binary that runs at the same time.
//!
//! Without the binaries the test fails with the command that installs them: a test that
//! cannot run fails, it never passes.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What installs the binaries, in the failure of a test that needs them.
pub const INSTALL: &str = "apt-get install -y postgresql";

/// A running throwaway Postgres. See the module's documentation.
#[derive(Debug)]
pub struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// The user the server runs as, when the test runs as root.
    run_as: Option<String>,
}

/// The newest `bin` directory of Debian's `postgresql` packages, or `$PG_BIN` when set.
fn find_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("PG_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.join("initdb").is_file(),
            "PG_BIN={} holds no initdb (unset it to use Debian's postgresql: `{INSTALL}`)",
            bin.display()
        );
        return bin;
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max();
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "this test needs a real Postgres and found no /usr/lib/postgresql/*/bin/initdb: \
             install Debian's postgresql (`{INSTALL}`), or set PG_BIN to a directory holding \
             initdb and pg_ctl"
        ),
    }
}

/// A port nothing listens on now, on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a free port on 127.0.0.1")
        .port()
}

fn check(what: &str, output: std::io::Result<Output>) -> Output {
    let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

impl Postgres {
    /// Starts a fresh server; panics (failing the test) with what is missing when it cannot.
    pub fn start() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let bin = find_bin();
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let dir = std::env::temp_dir().join(format!(
            "hitl-postgres-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the Postgres test directory");
        let run_as = root.then(|| "postgres".to_owned());
        if root {
            let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
            let ids = passwd.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.first() == Some(&"postgres") && fields.len() > 3)
                    .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                    .flatten()
            });
            let Some((uid, gid)) = ids else {
                panic!(
                    "this test runs as root, and initdb refuses root, but there is no `postgres` \
                     user to run it as: install Debian's postgresql (`{INSTALL}`), which creates it"
                );
            };
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("giving the Postgres test directory to the postgres user");
        }
        let mut server = Self {
            bin,
            dir,
            port: 0,
            run_as,
        };
        let data = server.dir.join("data");
        check(
            "initdb",
            server
                .command("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
                .arg("--no-sync")
                .output(),
        );
        // A port found free may be taken before the server binds it: try another.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port();
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=100",
                server.port,
                server.dir.display()
            );
            let started = server
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(server.dir.join("log"))
                .args(["-w", "-t", "60", "-o", &options, "start"])
                .output()
                .expect("running pg_ctl start");
            if started.status.success() {
                return server;
            }
            last = Some(started);
        }
        let log = std::fs::read_to_string(server.dir.join("log")).unwrap_or_default();
        let last = last.expect("at least one attempt");
        panic!(
            "pg_ctl start failed five times: {}\n{}{}\nlog:\n{log}",
            last.status,
            String::from_utf8_lossy(&last.stdout),
            String::from_utf8_lossy(&last.stderr)
        );
    }

    /// The server every test of this binary running now shares, started by the first of them
    /// and stopped when the last one drops it.
    pub fn shared() -> Arc<Self> {
        static SHARED: Mutex<Weak<Postgres>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(Self::start());
        *shared = Arc::downgrade(&server);
        server
    }

    /// `name` of the server's `bin` directory, run as the server's user.
    fn command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    /// Creates the database `name` (a fresh one: it must not exist) and returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        check(
            &format!("createdb {name}"),
            self.command("createdb")
                .args(["-h"])
                .arg(&self.dir)
                .args(["-p", &self.port.to_string(), "-U", "postgres", name])
                .output(),
        );
        self.url(name)
    }

    /// The URL of the database `name`: user `postgres`, no password (trust), over TCP on
    /// 127.0.0.1.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
