//! Structured logs of the long-running commands (controller and gate), to stderr, filtered by
//! `RUST_LOG` (default `info`; rmcp's own logs off unless named).

/// Log output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// The log filter: `RUST_LOG` (default `info`), with rmcp's own logs off unless `RUST_LOG`
/// names rmcp. The controller reports a failing tool server once, in the RemoteMCPServer's
/// condition and an Event; rmcp would log every retry at ERROR.
fn filter(rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    let directives = rust_log.unwrap_or("info");
    let filter = tracing_subscriber::EnvFilter::try_new(directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if directives.contains("rmcp") {
        filter
    } else {
        filter.add_directive("rmcp=off".parse().expect("a valid directive"))
    }
}

/// Installs the global subscriber; a second call (tests) keeps the first.
pub fn init(format: LogFormat) {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::filter;

    #[test]
    fn rmcp_is_silenced_unless_asked_for() {
        assert_eq!(filter(None).to_string(), "rmcp=off,info");
        assert_eq!(filter(Some("debug")).to_string(), "rmcp=off,debug");
        assert_eq!(
            filter(Some("info,rmcp=debug")).to_string(),
            "rmcp=debug,info"
        );
    }
}
