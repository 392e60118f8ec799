//! ApprovalRequest reconciler: adopts requests (owner reference to their Agent or ToolGate,
//! `spec.agentRef.kind`), computes the phase from spec, status, policy and the injected clock,
//! publishes Events on the request and its Agent or ToolGate, requeues at `expiresAt`, and
//! deletes finished requests after `ttlAfterFinished`.
//!
//! The decision path itself does not go through here: the gate watches its own request.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::compact::{CachedAgent, CachedRequest};
use super::watches::ApprovalRequestWatches;
use super::{
    CACHE_SYNC_BOUND, Context, bounded, drain, due_in, escalation, measured, notifier,
    retry_after_error,
};
use crate::Result;
use crate::api::agent::{ApprovalRule, RuleAction};
use crate::api::approval_request::{ApprovalRequestStatus, PolicyKind};
use crate::api::common::parse_duration_seconds;
use crate::api::freeze::{FROZEN, Freeze};
use crate::api::{Agent, ApprovalMode, ApprovalNotifier, ApprovalRequest, Phase, ToolGate};
use crate::apiserver::conditions::find;
use crate::apiserver::{apply_params, apply_status, new_condition, set_condition};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "approvalrequest";
/// Condition set when a request reaches a terminal phase; its lastTransitionTime starts the TTL.
pub const FINISHED: &str = "Finished";
/// Reason of a request withdrawn because approval is no longer required or the Agent is gone.
pub const POLICY_CHANGED: &str = "PolicyChanged";
/// Kept when the Agent does not say (`ttlAfterFinished`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// What the Agent or ToolGate says now about a request that is still open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Its tool still needs approval: it goes on.
    Open,
    /// Approval is no longer required for its tool, or its Agent or ToolGate is gone: cancel it.
    Withdrawn,
    /// Its Agent or ToolGate is frozen (the freeze, described): cancel it.
    Frozen(String),
}

/// Where a request stands, as computed by [`evaluate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The phase.
    pub phase: Phase,
    /// Why a request was cancelled ([`POLICY_CHANGED`] or [`FROZEN`]); the phase otherwise.
    pub reason: &'static str,
    /// When the decision was made, when there is one.
    pub decided_at: Option<Timestamp>,
    /// Human-readable state.
    pub message: String,
}

/// Whether the request's tool still needs approval at its server under its Agent's policy: it
/// is in `requireApproval`, or, for a request an approval rule asked for (`spec.rule`), that
/// rule still applies to the call's server and tool, can still ask, and asks for no more
/// approvals than the request's `requiredApprovals`; a request made because the tool's
/// definition was not the accepted one asks while the tool is offered. `None` for the Agent
/// means it is gone.
pub fn still_required(
    request: &ApprovalRequest,
    agent: Option<&Agent>,
    default_mode: ApprovalMode,
) -> bool {
    let Some(agent) = agent.filter(|a| a.meta().deletion_timestamp.is_none()) else {
        return false;
    };
    let Some(declarative) = &agent.spec.declarative else {
        return false;
    };
    let mode = declarative
        .approval
        .as_ref()
        .and_then(|a| a.mode)
        .unwrap_or(default_mode);
    if !mode.uses_gate() {
        return false;
    }
    let agent_namespace = agent.namespace().unwrap_or_default();
    let target = &request.spec.tool_server;
    let tool = &request.spec.tool_name;
    if request.spec.agent_ref.kind() != PolicyKind::Agent {
        return false;
    }
    let rules = declarative
        .approval
        .iter()
        .flat_map(|approval| &approval.rules);
    declarative
        .tools
        .iter()
        .filter_map(|t| t.mcp_server.as_ref())
        .filter(|server| {
            server.kind.unwrap_or_default() == target.kind
                && server.name == target.name
                && server.namespace.as_deref().unwrap_or(&agent_namespace) == target.namespace
        })
        .any(|server| match &request.spec.rule {
            _ if definition_changed(request) => server.tool_names.contains(tool),
            Some(name) => rule_still_asks(rules.clone(), request, name, &server.name),
            None => server.require_approval.contains(tool),
        })
}

/// Whether the gate asked because the tool's definition was not the accepted one
/// (docs/policies.md, "Changed tool definitions"): that holds whatever the rules say now.
fn definition_changed(request: &ApprovalRequest) -> bool {
    request
        .spec
        .tool_annotations
        .as_ref()
        .is_some_and(|a| a.definition_change.is_some())
}

/// [`still_required`] for a request made through a ToolGate (`None`: it is gone): the call is
/// to the ToolGate's server, and its tool is in `requireApproval` or the rule that asked still
/// asks.
pub fn still_required_by_tool_gate(
    request: &ApprovalRequest,
    tool_gate: Option<&ToolGate>,
) -> bool {
    let Some(tool_gate) = tool_gate.filter(|t| t.meta().deletion_timestamp.is_none()) else {
        return false;
    };
    let target = &request.spec.tool_server;
    let server = tool_gate.server_name();
    if target.name != server || Some(&target.namespace) != tool_gate.namespace().as_ref() {
        return false;
    }
    let rules = tool_gate.spec.approval.iter().flat_map(|a| &a.rules);
    match &request.spec.rule {
        _ if definition_changed(request) => {
            tool_gate.spec.tool_names.contains(&request.spec.tool_name)
        }
        Some(name) => rule_still_asks(rules, request, name, &server),
        None => tool_gate
            .spec
            .require_approval
            .contains(&request.spec.tool_name),
    }
}

/// Whether the rule `name` among `rules`, which asked for `request`, still applies to the
/// call's server (`server`) and tool and can still ask: it requires approval, or its
/// condition may fail to evaluate. A rule now asking for more approvals than the request
/// holds out for cancels it: the gate would not trust it, and asks afresh.
fn rule_still_asks<'a>(
    mut rules: impl Iterator<Item = &'a ApprovalRule>,
    request: &ApprovalRequest,
    name: &str,
    server: &str,
) -> bool {
    rules.any(|rule| {
        rule.name == name
            && rule.tool == request.spec.tool_name
            && rule.server.as_deref().is_none_or(|s| s == server)
            && (rule.action == RuleAction::RequireApproval || rule.when.is_some())
            && rule
                .required_approvals
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1)
                <= request.required_approvals()
    })
}

/// Computes the phase of `request` at `now` ([`ApprovalRequest::phase_at`]) under what its
/// Agent or ToolGate says now: an undecided or approved-but-unused request is Cancelled when
/// its tool no longer needs approval, its Agent or ToolGate is gone, or is frozen.
pub fn evaluate(request: &ApprovalRequest, standing: &Standing, now: Timestamp) -> Evaluation {
    let status = request.status.clone().unwrap_or_default();
    if let Some(phase) = status.phase.filter(|p| p.is_terminal()) {
        let reason = find(&status.conditions, FINISHED)
            .and_then(|c| {
                [FROZEN, POLICY_CHANGED]
                    .into_iter()
                    .find(|r| *r == c.reason)
            })
            .unwrap_or(phase.as_str());
        return Evaluation {
            phase,
            reason,
            decided_at: status.decided_at.map(|t| t.0),
            message: status.message.unwrap_or_else(|| phase.as_str().to_string()),
        };
    }
    let expires_at = request.spec.expires_at.0;
    let decision = request.spec.decision.as_ref();
    let decided_at = decision.map(|_| request.decision_recorded_at().unwrap_or(now));
    let by = |reason: &Option<String>| {
        reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    };
    let (phase, reason) = match (request.phase_at(now), standing) {
        (Phase::Pending | Phase::Approved, Standing::Frozen(_)) => (Phase::Cancelled, FROZEN),
        (Phase::Pending | Phase::Approved, Standing::Withdrawn) => {
            (Phase::Cancelled, POLICY_CHANGED)
        }
        (phase, _) => (phase, phase.as_str()),
    };
    let message = match (phase, decision, decided_at) {
        (Phase::Executed, _, _) => format!(
            "approved call forwarded once by {}",
            status.consumed_by.as_deref().unwrap_or("the gate")
        ),
        (Phase::Cancelled, _, _) => match standing {
            Standing::Frozen(freeze) => format!(
                "cancelled: {freeze}; nothing runs when the freeze is lifted, the call must be made again"
            ),
            _ => "approval is no longer required for this tool, or the agent is gone".into(),
        },
        (Phase::Expired, Some(_), Some(at)) => format!(
            "decided at {at} after the request expired at {expires_at}; the call does not run"
        ),
        (Phase::Expired, _, _) => {
            format!("no decision before {expires_at}; the call does not run")
        }
        (Phase::Denied, Some(d), _) => format!("denied by {}{}", d.decided_by, by(&d.reason)),
        (Phase::Approved, Some(d), _) => format!("approved by {}{}", d.decided_by, by(&d.reason)),
        (Phase::Pending, _, _) => pending_message(request),
        (phase, _, _) => phase.as_str().to_string(),
    };
    Evaluation {
        phase,
        reason,
        decided_at,
        message,
    }
}

/// What a Pending request waits for: a decision, or on a request needing several approvals,
/// how many of them are in (`1 of 2 approvals (alice)`) and what is missing.
fn pending_message(request: &ApprovalRequest) -> String {
    let expires_at = request.spec.expires_at.0;
    let required = request.required_approvals();
    if required <= 1 {
        return format!("waiting for a decision until {expires_at}");
    }
    let approvers = request.approvers();
    let given = approvers.len();
    let who = if approvers.is_empty() {
        String::new()
    } else {
        format!(" ({})", approvers.join(", "))
    };
    let waiting = match (&request.spec.decision, required as usize) {
        (Some(_), _) => "an Approve decision without those approvals does not count".to_owned(),
        (None, needed) if given < needed => {
            format!("waiting for {} more until {expires_at}", needed - given)
        }
        (None, _) => {
            format!("waiting for one of the approvers to record the decision until {expires_at}")
        }
    };
    format!("{given} of {required} approvals{who}; {waiting}")
}

/// How long a fresh approval is left to the gate. Its claim (status Executed, guarded by the
/// request's resourceVersion) is then the only status write, so it never conflicts with the
/// controller's; a request still unclaimed after this is recorded as Approved.
pub const CLAIM_GRACE: Duration = Duration::from_secs(5);

/// How long to leave `evaluation`'s approval to the gate before recording it, if it is a fresh
/// one: Approved, not recorded yet (`recorded` is the status phase), decided less than
/// [`CLAIM_GRACE`] ago.
pub fn left_to_gate(
    recorded: Option<Phase>,
    evaluation: &Evaluation,
    now: Timestamp,
) -> Option<Duration> {
    if evaluation.phase != Phase::Approved || recorded == Some(Phase::Approved) {
        return None;
    }
    let grace = SignedDuration::try_from(CLAIM_GRACE).ok()?;
    let settled = evaluation.decided_at?.checked_add(grace).ok()?;
    (now < settled).then(|| until(now, settled))
}

/// The instant a finished request may be deleted: `ttl` after it finished. Approved requests
/// that are never used count as finished at `expiresAt`.
pub fn delete_at(
    request: &ApprovalRequest,
    phase: Phase,
    finished_at: Option<Timestamp>,
    ttl: Duration,
) -> Option<Timestamp> {
    let ttl = SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX);
    let start = match phase {
        Phase::Pending => return None,
        Phase::Approved => request.spec.expires_at.0,
        _ => finished_at?,
    };
    start.checked_add(ttl).ok()
}

/// When a request in `phase` finished, from the facts no status write can move back: its
/// `consumedAt` (Executed) and `decidedAt` (Denied) are write-once and `expiresAt` (Expired) is
/// immutable; the `Finished` condition's time (`condition`) stands in only where none is
/// known. So rewriting the conditions cannot bring a deletion forward.
fn finished_at(
    request: &ApprovalRequest,
    phase: Phase,
    condition: Option<Timestamp>,
) -> Option<Timestamp> {
    let status = request.status.as_ref();
    let fact = match phase {
        Phase::Executed => status.and_then(|s| s.consumed_at.as_ref()),
        Phase::Denied => status.and_then(|s| s.decided_at.as_ref()),
        Phase::Expired => Some(&request.spec.expires_at),
        Phase::Pending | Phase::Approved | Phase::Cancelled => None,
    };
    fact.map(|t| t.0).or(condition)
}

/// The Agent or ToolGate a request was made under (`spec.agentRef`), as the caches hold it.
enum Policy {
    /// An Agent, decoded from the cache.
    Agent(Box<Agent>),
    /// A ToolGate, as cached.
    ToolGate(Arc<ToolGate>),
}

impl Policy {
    /// The Agent or ToolGate `request` names, if it is cached.
    fn of(request: &ApprovalRequest, ctx: &Context) -> Result<Option<Self>> {
        let namespace = request.namespace().unwrap_or_default();
        let agent_ref = &request.spec.agent_ref;
        Ok(match agent_ref.kind() {
            PolicyKind::Agent => ctx
                .stores
                .agents
                .get(&ObjectRef::new(&agent_ref.name).within(&namespace))
                .map(|agent| agent.object())
                .transpose()?
                .map(|agent| Self::Agent(Box::new(agent))),
            PolicyKind::ToolGate => ctx
                .stores
                .tool_gates
                .get(&ObjectRef::new(&agent_ref.name).within(&namespace))
                .map(Self::ToolGate),
        })
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        match self {
            Self::Agent(agent) => agent.meta(),
            Self::ToolGate(tool_gate) => tool_gate.meta(),
        }
    }

    /// Its labels, which a notifier's `agentSelector` matches.
    fn labels(&self) -> &BTreeMap<String, String> {
        match self {
            Self::Agent(agent) => agent.labels(),
            Self::ToolGate(tool_gate) => tool_gate.labels(),
        }
    }

    /// A reference to it, for Events.
    fn object_ref(&self) -> ObjectReference {
        match self {
            Self::Agent(agent) => agent.object_ref(&()),
            Self::ToolGate(tool_gate) => tool_gate.object_ref(&()),
        }
    }

    /// A (non-controller) owner reference to it, so its requests go with it.
    fn owner_reference(&self) -> Option<OwnerReference> {
        let (api_version, kind) = match self {
            Self::Agent(_) => (Agent::api_version(&()), Agent::kind(&())),
            Self::ToolGate(_) => (ToolGate::api_version(&()), ToolGate::kind(&())),
        };
        let meta = self.meta();
        Some(OwnerReference {
            api_version: api_version.into_owned(),
            kind: kind.into_owned(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            ..Default::default()
        })
    }

    /// Whether `request`'s tool still needs approval under it ([`still_required`],
    /// [`still_required_by_tool_gate`]).
    fn still_requires(&self, request: &ApprovalRequest, default_mode: ApprovalMode) -> bool {
        match self {
            Self::Agent(agent) => still_required(request, Some(agent), default_mode),
            Self::ToolGate(tool_gate) => still_required_by_tool_gate(request, Some(tool_gate)),
        }
    }

    /// The freeze it is under ([`Stores::freeze_of`](super::Stores::freeze_of)).
    fn freeze(&self, ctx: &Context) -> Option<Freeze> {
        match self {
            Self::Agent(agent) => ctx.stores.freeze_of(agent.as_ref()),
            Self::ToolGate(tool_gate) => ctx.stores.freeze_of(tool_gate.as_ref()),
        }
    }

    /// Its `ttlAfterFinished`, if it sets one.
    fn ttl_after_finished(&self) -> Option<&str> {
        match self {
            Self::Agent(agent) => agent
                .spec
                .declarative
                .as_ref()
                .and_then(|d| d.approval.as_ref())
                .and_then(|a| a.ttl_after_finished.as_deref()),
            Self::ToolGate(tool_gate) => tool_gate
                .spec
                .approval
                .as_ref()
                .and_then(|a| a.ttl_after_finished.as_deref()),
        }
    }
}

/// `ttlAfterFinished` of the Agent or ToolGate, or the default.
fn ttl_of(policy: Option<&Policy>) -> Duration {
    policy
        .and_then(Policy::ttl_after_finished)
        .and_then(parse_duration_seconds)
        .map_or(DEFAULT_TTL, Duration::from_secs_f64)
}

/// Metric label of a phase reached (Executed was counted as approved already).
fn outcome(phase: Phase) -> Option<&'static str> {
    match phase {
        Phase::Approved => Some("approved"),
        Phase::Denied => Some("denied"),
        Phase::Expired => Some("expired"),
        Phase::Cancelled => Some("cancelled"),
        Phase::Pending | Phase::Executed => None,
    }
}

/// The ApprovalRequest controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: ApprovalRequestWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let ApprovalRequestWatches {
        requests,
        notifiers,
        agents,
        tool_gates,
        resync,
    } = watches;
    let approvals = ctx.stores.approvals.clone();
    let requests_by_agent = ctx.stores.requests_by_agent.clone();
    let open_in_namespace = {
        let approvals = approvals.clone();
        move |notifier: Arc<ApprovalNotifier>| {
            let namespace = notifier.namespace();
            approvals
                .state_filter(|r| r.namespace() == namespace && !r.is_finished())
                .iter()
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let controller = Controller::for_shared_stream(requests, approvals)
        .watches_shared_stream(notifiers, open_in_namespace)
        .with_config(bounded())
        .watches_shared_stream(agents, {
            let requests_by_agent = requests_by_agent.clone();
            move |agent: Arc<CachedAgent>| {
                let namespace = agent.namespace().unwrap_or_default();
                requests_by_agent.made_by(&namespace, PolicyKind::Agent, &agent.name_any())
            }
        })
        .watches_shared_stream(tool_gates, move |tool_gate: Arc<ToolGate>| {
            let namespace = tool_gate.namespace().unwrap_or_default();
            requests_by_agent.made_by(&namespace, PolicyKind::ToolGate, &tool_gate.name_any())
        })
        .reconcile_all_on(resync)
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

/// Reconciles one ApprovalRequest.
pub async fn reconcile(request: Arc<CachedRequest>, ctx: Arc<Context>) -> Result<Action> {
    measured(&ctx, CONTROLLER, request.as_ref(), async {
        reconcile_inner(&request.object()?, &ctx).await
    })
    .await
}

async fn reconcile_inner(request: &ApprovalRequest, ctx: &Context) -> Result<Action> {
    if request.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    ctx.caches.within(CACHE_SYNC_BOUND).await?;
    let namespace = request.namespace().unwrap_or_default();
    let name = request.name_any();
    let api: Api<ApprovalRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let policy = Policy::of(request, ctx)?;
    let now = ctx.clock.now();

    if let Some(owner) = policy.as_ref().and_then(Policy::owner_reference) {
        adopt(&api, request, owner).await?;
    }

    let freeze = policy.as_ref().and_then(|policy| policy.freeze(ctx));
    let default_mode = ctx.render.default_approval_mode;
    let standing = match freeze {
        Some(freeze) => Standing::Frozen(freeze.to_string()),
        None if policy
            .as_ref()
            .is_some_and(|p| p.still_requires(request, default_mode)) =>
        {
            Standing::Open
        }
        None => Standing::Withdrawn,
    };
    let evaluation = evaluate(request, &standing, now);
    let current = request.status.clone().unwrap_or_default();
    if let Some(wait) = left_to_gate(current.phase, &evaluation, now) {
        return Ok(Action::requeue(wait));
    }
    let mut status = ApprovalRequestStatus {
        phase: Some(evaluation.phase),
        decided_at: evaluation.decided_at.map(Time),
        consumed_at: None,
        consumed_by: None,
        conditions: current.conditions.clone(),
        message: Some(evaluation.message.clone()),
        // The deliveries' own (field manager hitl-operator-notifier): never applied here.
        notifications: Vec::new(),
        // The gate's, written with consumedAt: never applied here.
        edited_arguments_sha256: None,
        // The escalation steps' own (guarded writes, controller/escalation.rs).
        tier: None,
        escalations: Box::default(),
    };
    if evaluation.phase.is_terminal() {
        set_condition(
            &mut status.conditions,
            new_condition(
                FINISHED,
                true,
                evaluation.reason,
                evaluation.message.clone(),
                None,
                now,
            ),
        );
    }
    let owned = |s: &ApprovalRequestStatus| {
        (
            s.phase,
            s.decided_at.clone(),
            s.conditions.clone(),
            s.message.clone(),
        )
    };
    // The gate may set Executed itself; its Event goes out when the controller records it.
    let newly_finished =
        evaluation.phase.is_terminal() && find(&current.conditions, FINISHED).is_none();
    let changed = owned(&status) != owned(&current);
    if changed {
        apply_status(&api, request, &status).await?;
        if current.phase != Some(evaluation.phase) || newly_finished {
            announce(ctx, request, policy.as_ref(), &evaluation, current.phase).await;
        }
    }

    // An escalation step due is taken on a settled request (its write brings the next
    // reconcile, which tells the step's notifier).
    let step_at = if changed {
        None
    } else {
        let mut targets = vec![request.object_ref(&())];
        targets.extend(policy.as_ref().map(Policy::object_ref));
        escalation::step(ctx, request, evaluation.phase, &targets, now).await?
    };

    // Notifications go out about a settled request: a status written just now brings another
    // reconcile, which sends them.
    let notify_at = if changed {
        None
    } else {
        notifier::deliver(
            ctx,
            request,
            evaluation.phase,
            policy.as_ref().map(Policy::labels),
            now,
        )
        .await
    };

    let finished_at = finished_at(
        request,
        evaluation.phase,
        find(&status.conditions, FINISHED).map(|c| c.last_transition_time.0),
    );
    let next = match evaluation.phase {
        Phase::Pending => Some(request.spec.expires_at.0),
        phase => {
            let Some(delete_at) = delete_at(request, phase, finished_at, ttl_of(policy.as_ref()))
            else {
                return Ok([notify_at, step_at]
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or_else(Action::await_change, |at| due_in(until(now, at))));
            };
            if now >= delete_at {
                tracing::info!(%namespace, %name, phase = phase.as_str(), "deleting finished ApprovalRequest");
                let params = DeleteParams {
                    preconditions: request.uid().map(|uid| kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&name, &params).await?;
                return Ok(Action::await_change());
            }
            Some(delete_at)
        }
    };
    let next = [next, notify_at, step_at].into_iter().flatten().min();
    Ok(match next {
        Some(at) => due_in(until(now, at)),
        None => Action::await_change(),
    })
}

/// Time from `now` to `at` (at least a second, so the requeue lands after the instant).
fn until(now: Timestamp, at: Timestamp) -> Duration {
    let wait = at.duration_since(now);
    Duration::try_from(wait).unwrap_or_default() + Duration::from_secs(1)
}

/// Adds `owner` (its Agent or ToolGate) to the request's owner references, so that it goes
/// with it, unless it is there.
async fn adopt(
    api: &Api<ApprovalRequest>,
    request: &ApprovalRequest,
    owner: OwnerReference,
) -> Result<()> {
    if request
        .owner_references()
        .iter()
        .any(|o| o.uid == owner.uid)
    {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": ApprovalRequest::api_version(&()),
        "kind": ApprovalRequest::kind(&()),
        "metadata": {"name": request.name_any(), "ownerReferences": [owner]},
    });
    api.patch(&request.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

/// Publishes the phase change on the request and its Agent or ToolGate, and counts the outcome.
async fn announce(
    ctx: &Context,
    request: &ApprovalRequest,
    policy: Option<&Policy>,
    evaluation: &Evaluation,
    previous: Option<Phase>,
) {
    let phase = evaluation.phase;
    if let Some(outcome) = outcome(phase).filter(|_| previous != Some(phase)) {
        let latency = evaluation
            .decided_at
            .zip(request.meta().creation_timestamp.as_ref())
            .filter(|_| matches!(phase, Phase::Approved | Phase::Denied))
            .and_then(|(decided, created)| {
                Duration::try_from(decided.duration_since(created.0)).ok()
            });
        ctx.metrics.decided(outcome, latency);
    }
    let (reason, type_) = match phase {
        Phase::Pending => ("ApprovalRequested", EventType::Normal),
        Phase::Approved => ("Approved", EventType::Normal),
        Phase::Executed => ("Executed", EventType::Normal),
        Phase::Denied => ("Denied", EventType::Warning),
        Phase::Expired => ("Expired", EventType::Warning),
        Phase::Cancelled => (evaluation.reason, EventType::Warning),
    };
    let tool = &request.spec.tool_name;
    let server = &request.spec.tool_server;
    let note = format!(
        "ApprovalRequest {}: {tool} on {} {}/{}: {}",
        request.name_any(),
        server.kind.as_str(),
        server.namespace,
        server.name,
        evaluation.message
    );
    let mut targets = vec![request.object_ref(&())];
    targets.extend(policy.map(Policy::object_ref));
    ctx.publish(type_, reason, note, "Decide", &targets).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::agent::ToolServerKind;
    use crate::api::approval_request::{
        AgentRef, ApprovalRequestSpec, Decision, DecisionType, ToolServerRef,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn request(
        decision: Option<DecisionType>,
        status: Option<ApprovalRequestStatus>,
    ) -> ApprovalRequest {
        let mut request = ApprovalRequest::new(
            "r",
            ApprovalRequestSpec {
                caller: None,
                agent_ref: AgentRef::agent("a"),
                tool_server: ToolServerRef {
                    kind: ToolServerKind::RemoteMCPServer,
                    name: "fs".into(),
                    namespace: "ns".into(),
                },
                tool_name: "delete_file".into(),
                arguments_preview: None,
                arguments_sha256: "0".repeat(64),
                arguments_bytes: 2,
                requested_by: "system:serviceaccount:ns:a".into(),
                message: None,
                context: None,
                rule: None,
                required_approvals: None,
                approvals: Vec::new(),
                expires_at: Time(at(100)),
                escalation: None,
                grant: None,
                decision: decision.map(|decision_type| Decision {
                    decision_type,
                    reason: Some("ok".into()),
                    decided_by: "alice".into(),
                }),
                edit: None,
                edit_approvals: Vec::new(),
                tool_annotations: None,
            },
        );
        request.status = status;
        request
    }

    fn decided_at(seconds: i64) -> ApprovalRequestStatus {
        ApprovalRequestStatus {
            phase: Some(Phase::Pending),
            decided_at: Some(Time(at(seconds))),
            ..Default::default()
        }
    }

    #[test]
    fn undecided_is_pending_until_expiry_then_expired() {
        let r = request(None, None);
        assert_eq!(evaluate(&r, &Standing::Open, at(99)).phase, Phase::Pending);
        assert_eq!(evaluate(&r, &Standing::Open, at(100)).phase, Phase::Expired);
    }

    #[test]
    fn decision_before_expiry_counts() {
        let approve = request(Some(DecisionType::Approve), Some(decided_at(50)));
        let e = evaluate(&approve, &Standing::Open, at(500));
        assert_eq!(e.phase, Phase::Approved);
        assert_eq!(e.decided_at, Some(at(50)));
        assert_eq!(e.message, "approved by alice: ok");
        let deny = request(Some(DecisionType::Deny), Some(decided_at(50)));
        assert_eq!(
            evaluate(&deny, &Standing::Open, at(60)).phase,
            Phase::Denied
        );
    }

    #[test]
    fn decision_after_expiry_stays_expired() {
        let late = request(Some(DecisionType::Approve), Some(decided_at(150)));
        assert_eq!(
            evaluate(&late, &Standing::Open, at(160)).phase,
            Phase::Expired
        );
        // First observed after expiry, with no recorded decision time.
        let unseen = request(Some(DecisionType::Approve), None);
        let e = evaluate(&unseen, &Standing::Open, at(101));
        assert_eq!(e.phase, Phase::Expired);
        assert_eq!(e.decided_at, Some(at(101)));
        // Already expired: a decision arriving later revives nothing.
        let expired = request(
            Some(DecisionType::Approve),
            Some(ApprovalRequestStatus {
                phase: Some(Phase::Expired),
                ..Default::default()
            }),
        );
        assert_eq!(
            evaluate(&expired, &Standing::Open, at(101)).phase,
            Phase::Expired
        );
    }

    #[test]
    fn decision_time_comes_from_managed_fields_when_status_lacks_it() {
        let mut r = request(Some(DecisionType::Approve), None);
        r.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-patch".into()),
            operation: Some("Update".into()),
            time: Some(Time(at(40))),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:decision": {".": {}}}}))),
            ..Default::default()
        }]);
        let e = evaluate(&r, &Standing::Open, at(150));
        assert_eq!(e.phase, Phase::Approved);
        assert_eq!(e.decided_at, Some(at(40)));
    }

    #[test]
    fn terminal_phases_are_sticky() {
        for phase in [
            Phase::Denied,
            Phase::Expired,
            Phase::Executed,
            Phase::Cancelled,
        ] {
            let r = request(
                Some(DecisionType::Approve),
                Some(ApprovalRequestStatus {
                    phase: Some(phase),
                    decided_at: Some(Time(at(10))),
                    ..Default::default()
                }),
            );
            assert_eq!(evaluate(&r, &Standing::Withdrawn, at(10_000)).phase, phase);
        }
    }

    #[test]
    fn consumed_approval_is_executed() {
        let mut status = decided_at(10);
        status.phase = Some(Phase::Approved);
        status.consumed_at = Some(Time(at(20)));
        status.consumed_by = Some("agent-pod".into());
        let r = request(Some(DecisionType::Approve), Some(status));
        let e = evaluate(&r, &Standing::Withdrawn, at(500));
        assert_eq!(e.phase, Phase::Executed);
        assert!(e.message.contains("agent-pod"));
    }

    #[test]
    fn policy_change_cancels_undecided_and_unused_approvals_only() {
        assert_eq!(
            evaluate(&request(None, None), &Standing::Withdrawn, at(1)).phase,
            Phase::Cancelled
        );
        let approved = request(Some(DecisionType::Approve), Some(decided_at(5)));
        assert_eq!(
            evaluate(&approved, &Standing::Withdrawn, at(6)).phase,
            Phase::Cancelled
        );
        let denied = request(Some(DecisionType::Deny), Some(decided_at(5)));
        assert_eq!(
            evaluate(&denied, &Standing::Withdrawn, at(6)).phase,
            Phase::Denied
        );
    }

    #[test]
    fn a_freeze_cancels_undecided_and_unused_approvals_and_says_why() {
        let frozen = Standing::Frozen(
            "Namespace demo is frozen (hitl.kagent.dev/freeze: incident 42)".into(),
        );
        let pending = evaluate(&request(None, None), &frozen, at(1));
        assert_eq!((pending.phase, pending.reason), (Phase::Cancelled, FROZEN));
        assert!(
            pending.message.contains("incident 42"),
            "{}",
            pending.message
        );
        assert!(
            pending
                .message
                .contains("nothing runs when the freeze is lifted")
        );
        let approved = request(Some(DecisionType::Approve), Some(decided_at(5)));
        assert_eq!(evaluate(&approved, &frozen, at(6)).phase, Phase::Cancelled);
        let denied = request(Some(DecisionType::Deny), Some(decided_at(5)));
        assert_eq!(evaluate(&denied, &frozen, at(6)).phase, Phase::Denied);
        let mut consumed = decided_at(5);
        consumed.consumed_at = Some(Time(at(6)));
        let executed = request(Some(DecisionType::Approve), Some(consumed));
        assert_eq!(evaluate(&executed, &frozen, at(7)).phase, Phase::Executed);
    }

    #[test]
    fn a_recorded_cancellation_keeps_its_reason_after_the_freeze_is_lifted() {
        let mut status = ApprovalRequestStatus {
            phase: Some(Phase::Cancelled),
            message: Some("cancelled: frozen".into()),
            ..ApprovalRequestStatus::default()
        };
        status.conditions.push(new_condition(
            FINISHED,
            true,
            FROZEN,
            "cancelled: frozen",
            None,
            at(1),
        ));
        let e = evaluate(&request(None, Some(status)), &Standing::Open, at(2));
        assert_eq!((e.phase, e.reason), (Phase::Cancelled, FROZEN));
        assert_eq!(e.message, "cancelled: frozen");
    }

    #[test]
    fn the_finish_comes_from_write_once_facts_not_conditions() {
        let r = request(
            None,
            Some(ApprovalRequestStatus {
                consumed_at: Some(Time(at(10))),
                decided_at: Some(Time(at(5))),
                ..Default::default()
            }),
        );
        let rewound = Some(at(-3600));
        assert_eq!(finished_at(&r, Phase::Executed, rewound), Some(at(10)));
        assert_eq!(finished_at(&r, Phase::Denied, rewound), Some(at(5)));
        assert_eq!(
            finished_at(&r, Phase::Expired, rewound),
            Some(r.spec.expires_at.0)
        );
        assert_eq!(finished_at(&r, Phase::Cancelled, rewound), rewound);
    }

    #[test]
    fn deletion_waits_for_the_ttl() {
        let r = request(None, None);
        let ttl = Duration::from_secs(60);
        assert_eq!(delete_at(&r, Phase::Pending, None, ttl), None);
        assert_eq!(
            delete_at(&r, Phase::Denied, Some(at(10)), ttl),
            Some(at(70))
        );
        assert_eq!(delete_at(&r, Phase::Approved, None, ttl), Some(at(160)));
    }

    #[test]
    fn a_request_a_rule_asked_for_stays_required_while_the_rule_can_ask() {
        let agent = |rules: &str| -> Agent {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2",
                "kind": "Agent",
                "metadata": {"name": "a", "namespace": "ns"},
                "spec": {"type": "Declarative", "declarative": {
                    "tools": [{"type": "McpServer", "mcpServer": {"name": "fs", "toolNames": ["delete_file"]}}],
                    "approval": {"rules": serde_json::from_str::<serde_json::Value>(rules).unwrap()}
                }}
            }))
            .unwrap()
        };
        let mut asked = request(None, None);
        asked.spec.rule = Some("guard".into());
        let required =
            |rules: &str| still_required(&asked, Some(&agent(rules)), ApprovalMode::Gate);
        assert!(required(
            r#"[{"name": "guard", "tool": "delete_file", "action": "RequireApproval"}]"#
        ));
        assert!(
            required(
                r#"[{"name": "guard", "tool": "delete_file", "when": "args.x", "action": "Allow"}]"#
            ),
            "a condition may fail to evaluate, which asks"
        );
        assert!(!required(
            r#"[{"name": "guard", "tool": "delete_file", "action": "Allow"}]"#
        ));
        assert!(!required(
            r#"[{"name": "other", "tool": "delete_file", "action": "RequireApproval"}]"#
        ));
        assert!(
            !still_required(&request(None, None), Some(&agent("[]")), ApprovalMode::Gate),
            "not in requireApproval and no rule asked"
        );
        // The rule now asks for more approvals than the request: the gate would not trust it.
        assert!(!required(
            r#"[{"name": "guard", "tool": "delete_file", "action": "RequireApproval", "requiredApprovals": 2}]"#
        ));
        asked.spec.required_approvals = Some(2);
        let required =
            |rules: &str| still_required(&asked, Some(&agent(rules)), ApprovalMode::Gate);
        assert!(required(
            r#"[{"name": "guard", "tool": "delete_file", "action": "RequireApproval", "requiredApprovals": 2}]"#
        ));
        assert!(required(
            r#"[{"name": "guard", "tool": "delete_file", "action": "RequireApproval"}]"#
        ));
    }

    #[test]
    fn a_request_for_a_changed_definition_stays_required_while_the_tool_is_offered() {
        let agent = |tools: &str| -> Agent {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2",
                "kind": "Agent",
                "metadata": {"name": "a", "namespace": "ns"},
                "spec": {"type": "Declarative", "declarative": {
                    "tools": [{"type": "McpServer", "mcpServer": {"name": "fs",
                        "toolNames": serde_json::from_str::<serde_json::Value>(tools).unwrap()}}],
                }}
            }))
            .unwrap()
        };
        let mut asked = request(None, None);
        assert!(
            !still_required(
                &asked,
                Some(&agent(r#"["delete_file"]"#)),
                ApprovalMode::Gate
            ),
            "not in requireApproval, no rule, no change"
        );
        asked.spec.tool_annotations = Some(Box::new(
            serde_json::from_value(serde_json::json!({
                "trusted": false, "definitionSha256": "ab".repeat(32),
                "definitionChange": {"acceptedSha256": "cd".repeat(32), "changed": ["description"]},
            }))
            .unwrap(),
        ));
        assert!(still_required(
            &asked,
            Some(&agent(r#"["delete_file"]"#)),
            ApprovalMode::Gate
        ));
        assert!(!still_required(
            &asked,
            Some(&agent(r#"["read_file"]"#)),
            ApprovalMode::Gate
        ));
        assert!(!still_required(&asked, None, ApprovalMode::Gate));
    }

    #[test]
    fn a_quorum_request_says_how_many_approvals_are_in() {
        let mut r = request(None, None);
        r.spec.required_approvals = Some(2);
        let message = |r: &ApprovalRequest| {
            let e = evaluate(r, &Standing::Open, at(10));
            assert_eq!(e.phase, Phase::Pending);
            e.message
        };
        assert_eq!(
            message(&r),
            format!("0 of 2 approvals; waiting for 2 more until {}", at(100))
        );
        r.spec
            .approvals
            .push(crate::api::approval_request::Approval {
                approved_by: "alice".into(),
                reason: None,
                at: None,
            });
        assert_eq!(
            message(&r),
            format!(
                "1 of 2 approvals (alice); waiting for 1 more until {}",
                at(100)
            )
        );
        r.spec
            .approvals
            .push(crate::api::approval_request::Approval {
                approved_by: "bob".into(),
                reason: None,
                at: None,
            });
        assert_eq!(
            message(&r),
            format!(
                "2 of 2 approvals (alice, bob); waiting for one of the approvers to record the decision until {}",
                at(100)
            )
        );
        r.spec.decision = Some(Decision {
            decision_type: DecisionType::Approve,
            reason: None,
            decided_by: "bob".into(),
        });
        let e = evaluate(&r, &Standing::Open, at(10));
        assert_eq!(e.phase, Phase::Approved);
        assert_eq!(e.message, "approved by bob");
    }
}
