//! Structured logs of the long-running commands (controller and gate), to stderr, filtered by
//! `RUST_LOG` (default `info`).

/// Log output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Installs the global subscriber; a second call (tests) keeps the first.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Picks the one TLS provider every client of the process uses. kube is built on rustls with
/// ring, and reqwest/rmcp are built without a provider: without this they panic at run time.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
