//! Standing approvals as the gate uses them (docs/policies.md, "Standing grants"): before a
//! gated call asks a person, the gate looks for a live ApprovalGrant that covers it, records
//! one use of it exactly once, and leaves an ApprovalRequest decided by the grant, consumed by
//! this gate, so the audit trail holds every call.
//!
//! Exactly once: a use is the one guarded status write ([`crate::apiserver::guarded`]) over the
//! resourceVersion the gate judged, so a grant revoked, deleted or used up by another gate in the meantime is
//! never used (409 Conflict: read it again and judge again), and the CRD refuses `uses` above
//! `maxUses` whatever the writer. Anything that goes wrong before the use is recorded leaves
//! the call to a person; after it, the call is refused (a use counted for a call that did not
//! run errs on the side of fewer runs).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};

use super::decision::CallKey;
use super::metrics::Metrics;
use super::sessions;
use crate::api::approval_grant::{ApprovalGrant, ApprovalGrantStatus};
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite};
use crate::apiserver::paging::list_keeping;
use crate::condition::{Activation, Condition};

/// Prefix of the usernames of ServiceAccounts, which never grant.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// How many 409 Conflicts recording one use the gate re-reads before trying another grant.
const MAX_USE_CONFLICTS: u32 = 5;

/// What a grant is judged against: the call, its session and its facts for `when`.
pub struct GrantedCall<'a> {
    /// The call (agent, server, tool, approvals it needs).
    pub key: &'a CallKey,
    /// The MCP session id the client sent, if any.
    pub session: Option<&'a str>,
    /// The caller's username on a shared gate; `None` on an Agent's gate.
    pub caller: Option<&'a str>,
    /// The call's facts, for the grant's `when`.
    pub facts: &'a Activation,
    /// The gate's own identity (its ServiceAccount's username), which never grants.
    pub gate: &'a str,
}

/// Why `grant` does not cover `call` at `now`, if it does not. A grant covers a call of its
/// agent (or ToolGate: `agentRef.kind` must be the gate's) to its server (and its tool, when
/// it names one; its caller, when it names one, which only a shared gate's calls have; its
/// session, when it names one and that session began at this gate process, by the call's
/// caller, [`sessions`]) while
/// it is not revoked or being deleted, before its `expiresAt`, which may lie at most `max_ttl`
/// after its creation, with uses left, granted by a person (not a ServiceAccount, not the
/// requester), to a call needing one approval, whose arguments satisfy its `when`.
pub fn why_not_covered(
    grant: &ApprovalGrant,
    call: &GrantedCall,
    now: Timestamp,
    max_ttl: SignedDuration,
) -> Option<String> {
    let spec = &grant.spec;
    let key = call.key;
    if spec.agent_ref.name != key.agent
        || spec.agent_ref.kind() != key.kind
        || spec.tool_server.kind != key.server_kind
        || spec.tool_server.namespace != key.server_namespace
        || spec.tool_server.name != key.server_name
        || spec.tool_name.as_ref().is_some_and(|t| *t != key.tool)
    {
        return Some("it is for another agent, server or tool".into());
    }
    if let Some(only) = &spec.caller {
        match call.caller {
            Some(caller) if caller == only => {}
            Some(_) => return Some(format!("it is for the caller {only} only")),
            None => {
                return Some(format!(
                    "it is for the caller {only} only, and calls through an Agent's gate have no caller"
                ));
            }
        }
    }
    if let Some(session) = &spec.session_id {
        if call.session != Some(session.as_str()) {
            return Some(format!("it is for the MCP session {session} only"));
        }
        // Any client can send any Mcp-Session-Id: only a session that began here, by this
        // caller, counts.
        if !sessions::ledger().began(
            &key.server_namespace,
            &key.server_name,
            session,
            call.caller,
        ) {
            return Some(format!(
                "its MCP session {session} did not begin at this gate"
            ));
        }
    }
    if grant.is_revoked() {
        return Some("it is revoked".into());
    }
    if grant.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".into());
    }
    if key.required_approvals > 1 {
        return Some(format!(
            "the call needs {} approvals; a grant stands for one",
            key.required_approvals
        ));
    }
    let granted_by = spec.granted_by.trim();
    if granted_by.is_empty() || granted_by.starts_with(SERVICE_ACCOUNT_PREFIX) {
        return Some(format!("it was granted by {granted_by:?}, not by a person"));
    }
    if granted_by == call.gate {
        return Some("it was granted by the agent itself".into());
    }
    if call.caller == Some(granted_by) {
        return Some("it was granted by the caller itself".into());
    }
    let expires_at = spec.expires_at.0;
    if now >= expires_at {
        return Some(format!("it expired at {expires_at}"));
    }
    let Some(created) = grant.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return Some("it has no creationTimestamp".into());
    };
    if expires_at.duration_since(created) > max_ttl {
        return Some(format!(
            "its expiresAt {expires_at} lies more than the longest grant lifetime ({max_ttl:#}) after its creation at {created}"
        ));
    }
    if let Some(max) = spec.max_uses
        && i64::from(grant.uses()) >= i64::from(max)
    {
        return Some(format!("it is used up ({max} uses)"));
    }
    let Some(when) = spec.when.as_deref() else {
        return None; // No condition: it covers every such call.
    };
    match Condition::compile(when).and_then(|c| c.evaluate(call.facts)) {
        Ok(true) => None,
        Ok(false) => Some("its condition (spec.when) is false for this call".into()),
        Err(why) => Some(format!(
            "its condition (spec.when) cannot be evaluated: {why}"
        )),
    }
}

/// The order grants are tried in: those with a use limit first (so an unlimited grant is not
/// spent where a limited one would do), then the soonest to expire, then by name.
fn preference(grant: &ApprovalGrant) -> (bool, Timestamp, String) {
    (
        grant.spec.max_uses.is_none(),
        grant.spec.expires_at.0,
        grant.metadata.name.clone().unwrap_or_default(),
    )
}

/// The gate's client for the ApprovalGrants of its agent's namespace.
#[derive(Clone)]
pub struct Grants {
    api: Api<ApprovalGrant>,
    max_ttl: SignedDuration,
    metrics: Arc<Metrics>,
}

impl Grants {
    /// Grants read through `client` in `namespace`, each living at most `max_ttl`; conflicts
    /// counted in `metrics`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        max_ttl: SignedDuration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            max_ttl,
            metrics,
        }
    }

    /// The grants that cover `call` at `now`, in the order to try them; none when they cannot
    /// be read (the call then goes to a person).
    pub async fn covering(&self, call: &GrantedCall<'_>, now: Timestamp) -> Vec<ApprovalGrant> {
        let covers = |g: &ApprovalGrant| {
            if g.spec.agent_ref.name != call.key.agent || g.spec.agent_ref.kind() != call.key.kind {
                return false;
            }
            match why_not_covered(g, call, now, self.max_ttl) {
                None => true,
                Some(why) => {
                    tracing::debug!(grant = %g.metadata.name.as_deref().unwrap_or_default(), %why, "grant does not cover the call");
                    false
                }
            }
        };
        let mut covering = match list_keeping(&self.api, &ListParams::default(), covers).await {
            Ok(covering) => covering,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list ApprovalGrants; the call goes to a person");
                return Vec::new();
            }
        };
        covering.sort_by_key(preference);
        covering
    }

    /// Records one use of `grant` for the request `request` with the one guarded status write,
    /// judging it again after each 409 Conflict while it still covers the call: the grant as
    /// used, or `None` when it could not be used.
    pub async fn record_use(
        &self,
        grant: ApprovalGrant,
        call: &GrantedCall<'_>,
        now: Timestamp,
        request: &str,
    ) -> Option<ApprovalGrant> {
        let name = grant.metadata.name.clone().unwrap_or_default();
        let written = GuardedWrite::status(&self.api, field_manager::GATE, MAX_USE_CONFLICTS)
            .write(grant, |current| {
                match why_not_covered(current, call, now, self.max_ttl) {
                    Some(why) => Err(why),
                    None => Ok(ApprovalGrantStatus {
                        uses: Some(
                            i32::try_from(current.uses().saturating_add(1)).unwrap_or(i32::MAX),
                        ),
                        last_used_at: Some(Time(now)),
                        last_used_by: Some(request.to_owned()),
                    }),
                }
            })
            .await;
        let outcome = match written {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(grant = %name, error = %e, "cannot record a use of the grant");
                return None;
            }
        };
        for _ in 0..outcome.conflicts {
            self.metrics.grant_use_conflict();
        }
        match outcome.guarded {
            Guarded::Written(used) => {
                tracing::info!(grant = %name, uses = used.uses(), %request, granted_by = %used.spec.granted_by, "grant used");
                Some(used)
            }
            Guarded::Declined(why) => {
                tracing::info!(grant = %name, %why, "grant no longer covers the call");
                None
            }
            Guarded::Gone | Guarded::Contended => None,
        }
    }
}

impl From<&ApprovalGrant> for crate::api::approval_request::GrantRef {
    fn from(grant: &ApprovalGrant) -> Self {
        Self {
            name: grant.metadata.name.clone().unwrap_or_default(),
            granted_by: grant.spec.granted_by.clone(),
            reason: Some(grant.spec.reason.chars().take(1024).collect()),
        }
    }
}

#[cfg(test)]
mod tests;
