//! The `kubectl hitl list` / `watch` table: pure formatting of ApprovalRequests.

use jiff::{SignedDuration, Timestamp};

use crate::api::ApprovalRequest;
use crate::gate::redact;
use crate::tool_risk;
use crate::visible::visible;

/// Widest ARGS cell, in characters; longer previews end in `...`.
pub const ARGS_WIDTH: usize = 40;

/// Column headers, without the leading NAMESPACE column.
const HEADERS: [&str; 8] = [
    "NAME",
    "AGENT",
    "TOOL",
    "ARGS",
    "PHASE",
    "APPROVALS",
    "AGE",
    "EXPIRES",
];

/// The cells of one request's row (with the namespace first when `all_namespaces`), hidden
/// characters written out. APPROVALS is given of required (`1/2`); TOOL carries the tool's
/// risk badges (`delete_file [destructive, open-world]`) when the request records them.
pub fn row(request: &ApprovalRequest, now: Timestamp, all_namespaces: bool) -> Vec<String> {
    let meta = &request.metadata;
    let mut cells = Vec::with_capacity(9);
    if all_namespaces {
        cells.push(meta.namespace.clone().unwrap_or_default());
    }
    cells.push(meta.name.clone().unwrap_or_default());
    // A shared gate's request: the ToolGate, and who called through it.
    cells.push(match &request.spec.caller {
        Some(caller) => format!(
            "{} (called by {})",
            request.spec.agent_ref.label(),
            caller.username
        ),
        None => request.spec.agent_ref.label(),
    });
    let badges = tool_risk::badges(request.spec.tool_annotations.as_deref());
    cells.push(if badges.is_empty() {
        request.spec.tool_name.clone()
    } else {
        format!("{} [{}]", request.spec.tool_name, badges.join(", "))
    });
    cells.push(args_preview(request));
    cells.push(phase_cell(request, now));
    cells.push(match &request.spec.grant {
        Some(grant) => format!("grant/{}", grant.name),
        None => request.approvals_summary(),
    });
    cells.push(meta.creation_timestamp.as_ref().map_or_else(
        || "<unknown>".to_owned(),
        |t| short_duration(now.duration_since(t.0)),
    ));
    cells.push(expires(request.spec.expires_at.0, now));
    cells
        .iter()
        .map(|cell| visible(cell).into_owned())
        .collect()
}

/// The phase, with the escalation tier of a pending request that escalates and when the next
/// step comes: `Pending (tier 1, next 4m)`.
fn phase_cell(request: &ApprovalRequest, now: Timestamp) -> String {
    let phase = request.phase_at(now);
    match request.spec.escalation.as_deref() {
        Some(escalation) if phase == crate::api::Phase::Pending => {
            let tier = request.tier();
            let next = escalation
                .next_at(tier)
                .map(|at| format!(", next in {}", short_duration(at.duration_since(now))))
                .unwrap_or_default();
            format!("{} (tier {tier}{next})", phase.as_str())
        }
        _ => phase.as_str().to_owned(),
    }
}

/// The header cells matching [`row`].
pub fn header(all_namespaces: bool) -> Vec<String> {
    all_namespaces
        .then_some("NAMESPACE")
        .into_iter()
        .chain(HEADERS)
        .map(str::to_owned)
        .collect()
}

/// A table with a header, columns padded to their widest cell and separated by three spaces.
pub fn table(requests: &[ApprovalRequest], now: Timestamp, all_namespaces: bool) -> String {
    let mut rows = vec![header(all_namespaces)];
    rows.extend(requests.iter().map(|r| row(r, now, all_namespaces)));
    layout(&rows)
}

/// Rows of cells (the header first) as a table: columns padded to their widest cell.
pub fn layout(rows: &[Vec<String>]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut widths = vec![0; first.len()];
    for cells in rows {
        for (w, cell) in widths.iter_mut().zip(cells) {
            *w = (*w).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|cells| format_line(cells, &widths))
        .collect()
}

/// One line of cells padded to `widths` (the last column is not padded), ending in a newline.
pub fn format_line(cells: &[String], widths: &[usize]) -> String {
    let mut line = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        if i + 1 == cells.len() {
            line.push_str(cell);
        } else {
            line.push_str(cell);
            line.push_str(&" ".repeat(width.saturating_sub(cell.chars().count()) + 3));
        }
    }
    line.push('\n');
    line
}

/// The arguments preview as compact JSON, cut to [`ARGS_WIDTH`] characters; `<none>` if absent.
/// A preview with redacted values starts with `(N redacted)`.
pub fn args_preview(request: &ApprovalRequest) -> String {
    let Some(preview) = &request.spec.arguments_preview else {
        return "<none>".to_owned();
    };
    let json = serde_json::to_string(preview).expect("a JSON map serializes");
    let text = match redact::redacted_paths(preview).len() {
        0 => json,
        n => format!("({n} redacted) {json}"),
    };
    truncate(&text, ARGS_WIDTH)
}

/// `text` cut to at most `width` characters, ending in `...` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let kept: String = text.chars().take(width.saturating_sub(3)).collect();
    format!("{kept}...")
}

/// `in 5m` before `expires_at`, `3m ago` after it.
pub fn expires(expires_at: Timestamp, now: Timestamp) -> String {
    if expires_at > now {
        format!("in {}", short_duration(expires_at.duration_since(now)))
    } else {
        format!("{} ago", short_duration(now.duration_since(expires_at)))
    }
}

/// A coarse human duration like kubectl's: `45s`, `12m`, `5h`, `3d` (negative counts as 0s).
pub fn short_duration(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::api::approval_request::fixture::request_json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn request(name: &str, ns: &str, preview: serde_json::Value) -> ApprovalRequest {
        let mut r = request_json();
        r["metadata"]["name"] = json!(name);
        r["metadata"]["namespace"] = json!(ns);
        r["spec"]["toolServer"]["namespace"] = json!(ns);
        r["spec"]["argumentsPreview"] = preview;
        serde_json::from_value(r).unwrap()
    }

    #[test]
    fn table_pads_columns() {
        let now = ts("2026-11-22T00:05:00Z");
        let rs = [
            request(
                "helper-delete-file-1",
                "team-a",
                json!({"path": "/data/report.csv"}),
            ),
            request(
                "x",
                "b",
                json!({"path": "/data/a-very-long-path/that/does/not/fit/here.csv"}),
            ),
        ];
        assert_eq!(
            table(&rs, now, false),
            "NAME                   AGENT    TOOL          ARGS                                       PHASE     APPROVALS   AGE   EXPIRES\n\
             helper-delete-file-1   helper   delete_file   {\"path\":\"/data/report.csv\"}                Pending   0/1         5m    in 55m\n\
             x                      helper   delete_file   {\"path\":\"/data/a-very-long-path/that/...   Pending   0/1         5m    in 55m\n"
        );
        let all = table(&rs[..1], now, true);
        assert!(all.starts_with("NAMESPACE   NAME  "), "{all}");
        assert!(
            all.lines()
                .nth(1)
                .unwrap()
                .starts_with("team-a      helper-delete-file-1   ")
        );
    }

    #[test]
    fn row_shows_expiry_and_missing_preview() {
        let mut r = request("r", "ns", json!({}));
        r.spec.arguments_preview = None;
        let cells = row(&r, ts("2026-11-22T01:03:00Z"), false);
        assert_eq!(
            cells,
            [
                "r",
                "helper",
                "delete_file",
                "<none>",
                "Expired",
                "0/1",
                "63m",
                "3m ago"
            ]
        );
        r.metadata.creation_timestamp = None;
        r.spec.expires_at = Time(ts("2026-11-25T01:03:00Z"));
        assert_eq!(
            row(&r, ts("2026-11-22T01:03:00Z"), false)[6..],
            ["<unknown>", "in 3d"]
        );
    }

    #[test]
    fn the_tool_cell_carries_the_risk_badges_and_who_vouches() {
        let mut r = request("r", "ns", json!({}));
        r.spec.tool_annotations = Some(Box::new(
            serde_json::from_value(json!({"readOnlyHint": true, "openWorldHint": false,
                "trusted": false, "definitionSha256": "ab".repeat(32)}))
            .unwrap(),
        ));
        let now = ts("2026-11-22T00:05:00Z");
        assert_eq!(
            row(&r, now, false)[2],
            "delete_file [read-only (untrusted)]"
        );
        r.spec.tool_annotations.as_mut().unwrap().trusted = true;
        assert_eq!(row(&r, now, false)[2], "delete_file [read-only]");
        let described = crate::cli::hitl::describe::describe(&r, now);
        assert!(
            described.contains(&format!(
                "Risk:         read-only (asserted by a trusted server; definition sha256 {})",
                "ab".repeat(32)
            )),
            "{described}"
        );
    }

    #[test]
    fn a_shared_gates_row_names_the_toolgate_and_its_caller() {
        let mut r = request("r", "ns", json!({}));
        r.spec.agent_ref.kind = Some(crate::api::approval_request::PolicyKind::ToolGate);
        r.spec.caller = Some(Box::new(crate::api::approval_request::Caller {
            username: "system:serviceaccount:apps:bot-a".into(),
            uid: None,
            groups: vec![],
        }));
        assert_eq!(
            row(&r, ts("2026-11-22T00:05:00Z"), false)[1],
            "ToolGate/helper (called by system:serviceaccount:apps:bot-a)"
        );
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "...");
        assert_eq!(truncate("ééééééé", 6), "ééé...");
        assert_eq!(
            truncate(&"x".repeat(41), ARGS_WIDTH).chars().count(),
            ARGS_WIDTH
        );
    }

    #[test]
    fn durations() {
        assert_eq!(short_duration(SignedDuration::from_secs(-5)), "0s");
        assert_eq!(short_duration(SignedDuration::from_secs(119)), "119s");
        assert_eq!(short_duration(SignedDuration::from_secs(120)), "2m");
        assert_eq!(short_duration(SignedDuration::from_hours(3)), "3h");
        assert_eq!(short_duration(SignedDuration::from_hours(49)), "2d");
    }
}
