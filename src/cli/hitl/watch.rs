//! `kubectl hitl watch`: one table line per new, changed or deleted request, as they happen.

use std::io::Write;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher};

use super::error::CommandError;
use super::table::{format_line, header, row};
use crate::api::ApprovalRequest;
use crate::apiserver::paging::paged;

/// Column widths of the streamed table (it cannot measure rows it has not seen yet).
const WIDTHS: [usize; 9] = [16, 40, 20, 24, 40, 9, 9, 6, 10];

/// The widths for the columns of [`header`].
fn widths(all_namespaces: bool) -> &'static [usize] {
    if all_namespaces {
        &WIDTHS
    } else {
        &WIDTHS[1..]
    }
}

/// The watch events of the requests `api` reaches, its list read a page at a time.
pub fn events(
    api: Api<ApprovalRequest>,
) -> impl Stream<Item = Result<Event<ApprovalRequest>, watcher::Error>> + Send {
    watcher(api, paged())
}

/// The line for one watch event, if it shows a request (`pending`: only Pending ones).
pub fn event_line(
    event: &Event<ApprovalRequest>,
    now: Timestamp,
    all_namespaces: bool,
    pending: bool,
) -> Option<String> {
    let (request, deleted) = match event {
        Event::Apply(r) | Event::InitApply(r) => (r, false),
        Event::Delete(r) => (r, true),
        Event::Init | Event::InitDone => return None,
    };
    let phase = request.phase_at(now);
    if pending && (deleted || phase != crate::api::Phase::Pending) {
        return None;
    }
    let mut cells = row(request, now, all_namespaces);
    if deleted {
        let phase_col = cells.len() - 4;
        cells[phase_col] = "Deleted".into();
    }
    Some(format_line(&cells, widths(all_namespaces)))
}

/// Print the header, then a line per event of `events` until it ends. Watch errors are reported
/// on `err` and the stream, which retries with backoff, goes on.
pub async fn print_events<S>(
    events: S,
    clock: &dyn Fn() -> Timestamp,
    all_namespaces: bool,
    pending: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError>
where
    S: Stream<Item = Result<Event<ApprovalRequest>, watcher::Error>>,
{
    out.write_all(format_line(&header(all_namespaces), widths(all_namespaces)).as_bytes())?;
    out.flush()?;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                if let Some(line) = event_line(&event, clock(), all_namespaces, pending) {
                    out.write_all(line.as_bytes())?;
                    out.flush()?;
                }
            }
            Err(e) => writeln!(err, "warning: watch: {e}; retrying")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::approval_request::fixture::request_json;

    fn request(decision: Option<&str>) -> ApprovalRequest {
        let mut v = request_json();
        v["metadata"]["name"] = json!("r1");
        v["spec"]["argumentsPreview"] = json!({"path": "/x"});
        if let Some(t) = decision {
            v["spec"]["decision"] = json!({"type": t, "decidedBy": "alice"});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn lines_per_event() {
        let now: Timestamp = "2026-11-22T00:01:00Z".parse().unwrap();
        let line = event_line(&Event::Apply(request(None)), now, false, false).unwrap();
        assert_eq!(
            line,
            format!(
                "{:<43}{:<23}{:<27}{:<43}{:<12}{:<12}{:<9}in 59m\n",
                "r1", "helper", "delete_file", "{\"path\":\"/x\"}", "Pending", "0/1", "60s"
            )
        );
        let deleted = event_line(&Event::Delete(request(None)), now, true, false).unwrap();
        assert!(
            deleted.starts_with("team-a") && deleted.contains("Deleted"),
            "{deleted}"
        );
        assert_eq!(event_line(&Event::Init, now, false, false), None);
        assert_eq!(event_line(&Event::InitDone, now, false, false), None);
        assert_eq!(
            event_line(&Event::Apply(request(Some("Deny"))), now, false, true),
            None
        );
        assert_eq!(
            event_line(&Event::Delete(request(None)), now, false, true),
            None
        );
        assert!(event_line(&Event::InitApply(request(None)), now, false, true).is_some());
    }
}
