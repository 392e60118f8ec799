//! `kubectl hitl grants` and `kubectl hitl approve --remember`: list, revoke and give
//! ApprovalGrants (docs/policies.md, "Standing grants").

use std::fmt::Write as _;
use std::str::FromStr;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;

use super::table::{expires, layout, truncate};
use crate::api::approval_grant::{ApprovalGrant, ApprovalGrantSpec, Revocation};
use crate::api::approval_request::ApprovalRequest;
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite, Outcome};
use crate::visible::visible;

/// How many writes a revocation sends before it gives up on a grant that keeps changing (each
/// of the gate's uses changes it).
const REVOKE_ATTEMPTS: u32 = 5;

/// How long `--remember` lasts when it names no duration.
pub const DEFAULT_REMEMBER: SignedDuration = SignedDuration::from_hours(1);

/// What `--remember` asks for: `session`, a duration (`1h`, `30m`) and `N-uses`, in any
/// combination, comma-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remember {
    /// Only the request's MCP session.
    pub session: bool,
    /// How long the grant lasts.
    pub lasts: SignedDuration,
    /// How many calls it covers at most.
    pub max_uses: Option<i32>,
}

impl FromStr for Remember {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut remember = Self {
            session: false,
            lasts: DEFAULT_REMEMBER,
            max_uses: None,
        };
        let mut lasts = None;
        for item in s.split(',').map(str::trim) {
            if item == "session" {
                remember.session = true;
            } else if let Some(n) = item.strip_suffix("-uses").or(item.strip_suffix("-use")) {
                let n: i32 = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| format!("{item:?}: N-uses needs N from 1 to 10000"))?;
                remember.max_uses = Some(n);
            } else {
                let d: SignedDuration = item.parse().map_err(|_| {
                    format!("{item:?} is none of session, a duration such as 1h or 30m, N-uses")
                })?;
                if d <= SignedDuration::ZERO {
                    return Err(format!("{item:?}: the duration must be positive"));
                }
                lasts = Some(d);
            }
        }
        remember.lasts = lasts.unwrap_or(DEFAULT_REMEMBER);
        Ok(remember)
    }
}

/// The grant `user` gives by approving `request` with `--remember`: the same agent, server and
/// tool (and session), from `now` for `remember.lasts`. An error says why the request cannot
/// be remembered.
pub fn grant_for(
    request: &ApprovalRequest,
    remember: &Remember,
    reason: Option<&str>,
    user: &str,
    now: Timestamp,
) -> Result<ApprovalGrant, String> {
    let name = request.name_any();
    if request.required_approvals() > 1 {
        return Err(format!(
            "approvalrequest/{name} needs {} approvals; a grant stands for one person's approval and cannot be remembered",
            request.required_approvals()
        ));
    }
    let session_id = if remember.session {
        let session = request
            .spec
            .context
            .as_ref()
            .and_then(|c| c.session_id.clone())
            .filter(|s| !s.is_empty());
        Some(session.ok_or_else(|| {
            format!("approvalrequest/{name} records no MCP session, so it cannot be remembered for its session")
        })?)
    } else {
        None
    };
    let expires_at = now
        .checked_add(remember.lasts)
        .map_err(|e| format!("{}: {e}", remember.lasts))?;
    let reason = reason.map_or_else(
        || format!("remembered when approving approvalrequest/{name}"),
        str::to_owned,
    );
    let prefix: String = format!("{}-{}", request.spec.agent_ref.name, request.spec.tool_name)
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(50)
        .collect();
    Ok(ApprovalGrant {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", prefix.trim_matches('-'))),
            namespace: request.namespace(),
            ..Default::default()
        },
        spec: ApprovalGrantSpec {
            agent_ref: request.spec.agent_ref.clone(),
            tool_server: request.spec.tool_server.clone(),
            tool_name: Some(request.spec.tool_name.clone()),
            when: None,
            session_id,
            // Remembering a shared gate's call covers its caller only.
            caller: request.spec.caller.as_ref().map(|c| c.username.clone()),
            expires_at: Time(expires_at),
            max_uses: remember.max_uses,
            reason: reason.chars().take(1024).collect(),
            granted_by: user.to_owned(),
            revoked: None,
        },
        status: None,
    })
}

/// Creates `grant`; the line to print, or the error line (with the apiserver's message).
pub async fn create(
    api: &Api<ApprovalGrant>,
    grant: &ApprovalGrant,
    now: Timestamp,
) -> Result<String, String> {
    let post = PostParams {
        field_manager: Some(field_manager::KUBECTL_HITL.into()),
        ..Default::default()
    };
    match api.create(&post, grant).await {
        Ok(created) => Ok(format!(
            "approvalgrant/{} created: {}",
            created.name_any(),
            covers(&created, now)
        )),
        Err(kube::Error::Api(s)) => Err(format!(
            "error: the grant was not created: {} (giving grants needs create on approvalgrants.kagent.dev and the verb approve on the agent)",
            s.message
        )),
        Err(e) => Err(format!("error: the grant was not created: {e}")),
    }
}

/// What a grant covers, in words.
pub fn covers(grant: &ApprovalGrant, now: Timestamp) -> String {
    let spec = &grant.spec;
    let mut s = format!(
        "{}'s calls of {} on {}/{}",
        spec.agent_ref.name,
        spec.tool_name.as_deref().unwrap_or("any gated tool"),
        spec.tool_server.namespace,
        spec.tool_server.name
    );
    if let Some(session) = &spec.session_id {
        let _ = write!(s, " in session {session}");
    }
    if let Some(when) = &spec.when {
        let _ = write!(s, " where {when}");
    }
    let _ = write!(
        s,
        " run without asking, expiring {} ({})",
        expires(spec.expires_at.0, now),
        spec.expires_at.0
    );
    if let Some(max) = spec.max_uses {
        let _ = write!(s, ", at most {max} times");
    }
    s
}

/// Where a grant stands at `now`: `Active`, `Revoked`, `Expired` or `UsedUp`.
pub fn state(grant: &ApprovalGrant, now: Timestamp) -> &'static str {
    if grant.is_revoked() {
        "Revoked"
    } else if now >= grant.spec.expires_at.0 {
        "Expired"
    } else if grant
        .spec
        .max_uses
        .is_some_and(|max| i64::from(grant.uses()) >= i64::from(max))
    {
        "UsedUp"
    } else {
        "Active"
    }
}

/// The `kubectl hitl grants` table.
pub fn table(grants: &[ApprovalGrant], now: Timestamp, all_namespaces: bool) -> String {
    let header = [
        "NAME",
        "AGENT",
        "SERVER",
        "TOOL",
        "SESSION",
        "USES",
        "STATE",
        "EXPIRES",
        "GRANTED-BY",
    ];
    let mut rows = vec![
        all_namespaces
            .then_some("NAMESPACE")
            .into_iter()
            .chain(header)
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    ];
    for g in grants {
        let spec = &g.spec;
        let mut cells = Vec::with_capacity(10);
        if all_namespaces {
            cells.push(g.namespace().unwrap_or_default());
        }
        cells.push(g.name_any());
        cells.push(spec.agent_ref.name.clone());
        cells.push(format!(
            "{}/{}",
            spec.tool_server.namespace, spec.tool_server.name
        ));
        cells.push(spec.tool_name.clone().unwrap_or_else(|| "*".into()));
        cells.push(truncate(spec.session_id.as_deref().unwrap_or("*"), 20));
        cells.push(match spec.max_uses {
            Some(max) => format!("{}/{max}", g.uses()),
            None => g.uses().to_string(),
        });
        cells.push(state(g, now).to_owned());
        cells.push(expires(spec.expires_at.0, now));
        cells.push(spec.granted_by.clone());
        rows.push(cells.iter().map(|c| visible(c).into_owned()).collect());
    }
    layout(&rows)
}

/// Revokes the named grants (sets `spec.revoked` with the one guarded write); one line per
/// grant, and whether all were revoked.
pub async fn revoke(
    api: &Api<ApprovalGrant>,
    names: &[String],
    namespace: &str,
) -> (Vec<String>, bool) {
    let mut lines = Vec::with_capacity(names.len());
    let mut ok = true;
    for name in names {
        let revoked = match api.get_opt(name).await {
            Ok(Some(grant)) => {
                GuardedWrite::spec(api, field_manager::KUBECTL_HITL, REVOKE_ATTEMPTS)
                    .write(grant, |_| Ok::<_, ()>(Revocation { revoked: true }))
                    .await
            }
            Ok(None) => Ok(Outcome {
                guarded: Guarded::Gone,
                conflicts: 0,
            }),
            Err(e) => Err(e),
        };
        let line = match revoked.map(|outcome| outcome.guarded) {
            Ok(Guarded::Written(_)) => {
                format!("approvalgrant/{name} revoked: calls it covered ask a person again")
            }
            Ok(Guarded::Gone) => {
                ok = false;
                format!("error: approvalgrant/{name} not found in namespace {namespace}")
            }
            Ok(Guarded::Declined(()) | Guarded::Contended) => {
                ok = false;
                format!(
                    "error: approvalgrant/{name} was not revoked: it changed under every attempt; try again"
                )
            }
            Err(e) => {
                ok = false;
                let message = match e {
                    kube::Error::Api(s) => s.message,
                    other => other.to_string(),
                };
                format!("error: approvalgrant/{name} was not revoked: {message}")
            }
        };
        lines.push(line);
    }
    (lines, ok)
}

#[cfg(test)]
mod tests;
