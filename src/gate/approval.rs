//! ApprovalRequests as the gate uses them: find or create the request of a gated call, watch
//! it until it is decided, and consume an approval exactly once.
//!
//! Naming: a call's requests are named `<agent>-<tool>-<h>-<generation>`, where `<h>` is the
//! first 16 hex digits of the SHA-256 of (agent, server kind/namespace/name, tool, binding
//! hash), and on a shared gate (a ToolGate) also of its kind and the caller's username: the
//! caller is part of what a request is about ([`CallKey`]), so identical calls of two callers
//! never share one request (nor one approval), and a shared gate's requests carry the label
//! `kagent.dev/caller-hash` and `spec.caller`. Generation 0 is the first request for that call; a finished request (Executed,
//! Denied, Expired, Cancelled) never blocks a new one: the gate lists the call's requests by
//! label, reuses a live one (Pending or Approved, not expired, not consumed) and otherwise
//! creates the next generation. Two gates creating the same name at once both end up on the one
//! the apiserver accepted (`AlreadyExists` is answered by reading it).
//!
//! A new request is created only while the agent is under its cap of open requests
//! ([`super::open_requests`]); reusing a live one is never refused by the cap.
//!
//! Only a request that says exactly what this gate would have written is reused: its preview,
//! message and size are recomputed from the call, and its `expiresAt` may not lie further from
//! its creation than the approval timeout. A name taken by anything else (another identity
//! planting a request with a false preview, or squatting the next names) is skipped for a
//! random generation, which cannot be guessed in advance.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::ObjectMeta;
use serde_json::Value;

use crate::api::escalation::{Escalation, RequestEscalation};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::decision::{CallKey, Clock, Refusal, Verdict, decide, is_live};
use super::freeze::FreezeWatch;
use super::grants::{GrantedCall, Grants};
use super::hash::ArgsDigest;
use super::metrics::Metrics;
use super::open_requests::OpenRequests;
use super::redact;
use crate::api::approval_request::{
    AgentRef, ApprovalRequest, ApprovalRequestSpec, ApprovalRequestStatus, CallContext, Caller,
    GrantRef, LABEL_AGENT, LABEL_ARGS_HASH, LABEL_CALLER_HASH, LABEL_GRANT, LABEL_TOOL, Phase,
    PolicyKind, ToolAnnotations, ToolServerRef, caller_label,
};
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite};
use crate::condition::Activation;
use crate::contract::gate_config::AgentIdentity;
use crate::{Error, Result};

/// Longest `spec.message`.
const MAX_MESSAGE_CHARS: usize = 4096;
/// How many generations a call may race through before the gate gives up.
const MAX_CREATE_ATTEMPTS: u64 = 8;
/// How many 409 Conflicts on consumption the gate re-reads before giving up.
const MAX_CONFLICTS: u32 = 5;
/// How long past the wait timeout a gated call may wait on the Kubernetes API in all, before
/// it is refused (so a hung apiserver cannot hold a call, or a client, forever).
pub const API_GRACE: Duration = Duration::from_secs(10);
/// Clock difference between the gate and the apiserver that the gate tolerates (and beyond
/// which it warns): a request's `expiresAt` may lie this much further from its creation than
/// the timeout.
const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(60);
/// How long a gated call waits for the gate to know whether its Agent is frozen (the watch of
/// the Agent starting or recovering) before it is refused.
pub const FREEZE_BOUND: Duration = Duration::from_secs(5);
/// How many ApprovalRequests a gate may create at once ([`CreationBudget`]).
pub const CREATE_BURST: u32 = 60;
/// How many more it may create per second after a burst.
pub const CREATE_PER_SECOND: u32 = 1;

/// Why a call is held: the approval rule that asked and how many approvals it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    /// The approval rule that asked; `None` when `requireApproval` did.
    pub rule: Option<String>,
    /// Distinct approvals the call needs.
    pub required_approvals: u32,
}

/// A gated call, as the approval flow needs it.
#[derive(Clone, Debug)]
pub struct GatedCall {
    /// What the request must be about.
    pub key: CallKey,
    /// Hash and size of the full arguments.
    pub digest: ArgsDigest,
    /// The redacted preview of the arguments, made once per call: the full arguments never
    /// reach this module.
    pub preview: serde_json::Map<String, serde_json::Value>,
    /// The approval rule that asked; `None` when `requireApproval` did.
    pub rule: Option<String>,
    /// Where the call came from.
    pub context: CallContext,
    /// Who made the call, on a shared gate (its username is `key.caller`): `spec.caller`.
    pub caller: Option<Caller>,
    /// The tool's annotations as its list showed them: `spec.toolAnnotations`.
    pub tool_annotations: Option<std::sync::Arc<ToolAnnotations>>,
    /// The asking rule's escalation, in place of the approval's: `spec.escalation`.
    pub escalation: Option<Escalation>,
}

/// How the approval of a call ended.
#[derive(Clone, Debug)]
pub enum Resolution {
    /// This gate consumed the approval: forward the call, once.
    Approved {
        /// Request name.
        name: String,
    },
    /// A grant covered the call; this gate recorded and consumed its request: forward it.
    Granted {
        /// Request name.
        name: String,
    },
    /// The call must not run.
    Refused {
        /// Request name.
        name: String,
        /// Why.
        refusal: Refusal,
    },
    /// Approved with an approver's edit (`spec.edit`), not yet consumed: the caller judges the
    /// edit against the full arguments, then consumes it ([`Approvals::consume_edited`]) or
    /// refuses it ([`Approvals::refuse_edit`]). Nothing runs before.
    Edited {
        /// The request as it was approved.
        request: Box<ApprovalRequest>,
    },
    /// Still undecided when the gate stopped waiting.
    Pending {
        /// Request name.
        name: String,
        /// The latest finished request for the same call, if any (e.g. an earlier denial).
        previous: Option<Box<ApprovalRequest>>,
    },
}

/// The gate's client for ApprovalRequests in the agent's namespace.
#[derive(Clone)]
pub struct Approvals {
    api: Api<ApprovalRequest>,
    agent: AgentIdentity,
    timeout: SignedDuration,
    wait: Duration,
    progress_every: Duration,
    pod: String,
    clock: Arc<dyn Clock>,
    budget: Arc<std::sync::Mutex<CreationBudget>>,
    metrics: Arc<Metrics>,
    freeze: FreezeWatch,
    grants: Option<Grants>,
    open: OpenRequests,
    escalation: Option<Escalation>,
}

/// A token bucket bounding how fast a gate creates ApprovalRequests, so a looping or hostile
/// agent cannot flood approvers: [`CREATE_BURST`] at once, then [`CREATE_PER_SECOND`].
#[derive(Debug)]
pub struct CreationBudget {
    tokens: f64,
    updated: Instant,
}

impl CreationBudget {
    /// A full bucket.
    pub fn new(now: Instant) -> Self {
        Self {
            tokens: f64::from(CREATE_BURST),
            updated: now,
        }
    }

    /// Takes one creation at `now`, if the budget allows it.
    pub fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.updated).as_secs_f64()
            * f64::from(CREATE_PER_SECOND);
        self.tokens = (self.tokens + refill).min(f64::from(CREATE_BURST));
        self.updated = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

/// Settings of [`Approvals`].
#[derive(Clone, Debug)]
pub struct ApprovalSettings {
    /// Time a request can be decided (`expiresAt = now + timeout`).
    pub timeout: Duration,
    /// Time a call is held open waiting.
    pub wait: Duration,
    /// Interval between progress notifications while waiting.
    pub progress_every: Duration,
    /// This gate's name in `status.consumedBy`.
    pub pod: String,
    /// Where claim conflicts are counted.
    pub metrics: Arc<Metrics>,
    /// The Agent's freeze: a frozen Agent's calls are refused while they wait, and its
    /// approvals are not consumed.
    pub freeze: FreezeWatch,
    /// The longest lifetime of an ApprovalGrant the gate honours; `None`: grants are off and
    /// every gated call asks a person.
    pub grant_max_ttl: Option<SignedDuration>,
    /// The count of the agent's open requests, under its cap: no request is created at the
    /// cap.
    pub open: OpenRequests,
    /// The Agent's escalation, copied into each request it makes with absolute instants.
    pub escalation: Option<Escalation>,
}

impl Approvals {
    /// A client writing requests for `agent` through `client`.
    pub fn new(
        client: kube::Client,
        agent: AgentIdentity,
        settings: ApprovalSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let grants = settings.grant_max_ttl.map(|max_ttl| {
            Grants::new(
                client.clone(),
                &agent.namespace,
                max_ttl,
                settings.metrics.clone(),
            )
        });
        Self {
            api: Api::namespaced(client, &agent.namespace),
            timeout: SignedDuration::try_from(settings.timeout).unwrap_or(SignedDuration::MAX),
            wait: settings.wait,
            progress_every: settings.progress_every,
            pod: settings.pod,
            agent,
            clock,
            budget: Arc::new(std::sync::Mutex::new(CreationBudget::new(Instant::now()))),
            metrics: settings.metrics,
            freeze: settings.freeze,
            grants,
            open: settings.open,
            escalation: settings.escalation,
        }
    }

    /// Whether the gate looks for ApprovalGrants before asking a person.
    pub fn grants_enabled(&self) -> bool {
        self.grants.is_some()
    }

    /// Lets `call`, whose facts for conditions are `facts`, run on a grant, if a live one
    /// covers it (docs/policies.md): records one use of the grant, then an ApprovalRequest
    /// decided by it and consumed by this gate. The request's name, or `None` when no grant
    /// covers the call (a person decides). An error after a use was recorded refuses the call.
    /// Unbounded in time: [`Self::resolve`] bounds it with the rest of the approval.
    pub async fn by_grant(&self, call: &GatedCall, facts: &Activation) -> Result<Option<String>> {
        let Some(grants) = &self.grants else {
            return Ok(None);
        };
        let gate = self.identity();
        let granted = GrantedCall {
            key: &call.key,
            session: call.context.session_id.as_deref(),
            caller: call.key.caller.as_deref(),
            facts,
            gate: &gate,
        };
        let now = self.clock.now();
        let covering = grants.covering(&granted, now).await;
        if covering.is_empty() {
            return Ok(None);
        }
        self.take_budget()?;
        let name = format!("{}-g{:08x}", base_name(&call.key), getrandom::u32()?);
        let mut used = None;
        for grant in covering {
            used = grants.record_use(grant, &granted, now, &name).await;
            if used.is_some() {
                break;
            }
        }
        let Some(grant) = used else {
            return Ok(None);
        };
        let grant_name = grant.metadata.name.clone().unwrap_or_default();
        let failed = |source| Error::GrantRecord {
            grant: grant_name.clone(),
            source,
        };
        let mut req = self.build(call, &name)?;
        req.spec.grant = Some(Box::new(GrantRef::from(&grant)));
        req.metadata
            .labels
            .get_or_insert_default()
            .insert(LABEL_GRANT.into(), label_value(&grant_name));
        let post = PostParams {
            field_manager: Some(field_manager::GATE.into()),
            ..Default::default()
        };
        let created = self.api.create(&post, &req).await.map_err(failed)?;
        let message = format!(
            "Approved by the ApprovalGrant {grant_name} (granted by {}) and forwarded by {}",
            grant.spec.granted_by, self.pod
        );
        // Only this gate knows the request's name; the guard still keeps a status the
        // controller wrote meanwhile, and a claim by anyone else ends it.
        let unclaimed =
            |r: &ApprovalRequest| r.status.as_ref().is_none_or(|s| s.consumed_at.is_none());
        match self
            .consume(created, &message, None, unclaimed)
            .await
            .map_err(|e| match e {
                Error::Kube(source) => failed(source),
                other => other,
            })? {
            Guarded::Written(_) => Ok(Some(name)),
            Guarded::Declined(_) | Guarded::Gone | Guarded::Contended => Err(Error::Contended {
                kind: "ApprovalRequest",
                name,
                attempts: MAX_CONFLICTS,
            }),
        }
    }

    /// Takes one creation from the budget, or says the agent asks too fast.
    fn take_budget(&self) -> Result<()> {
        if self
            .budget
            .lock()
            .expect("budget lock")
            .take(Instant::now())
        {
            Ok(())
        } else {
            Err(Error::TooManyRequests {
                burst: CREATE_BURST,
                per_second: CREATE_PER_SECOND,
            })
        }
    }

    /// The Agent's freeze, as this gate sees it.
    pub fn freeze(&self) -> &FreezeWatch {
        &self.freeze
    }

    /// The agent's namespace.
    pub fn namespace(&self) -> &str {
        &self.agent.namespace
    }

    /// The kind whose policy this gate enforces: an Agent's, or a ToolGate's.
    pub fn kind(&self) -> PolicyKind {
        self.agent.kind
    }

    /// This gate's identity: its ServiceAccount's username, the `requestedBy` of the requests
    /// it creates. Only requests that name it count.
    fn identity(&self) -> String {
        self.agent.requester()
    }

    /// Runs the whole approval of `call`: a grant covering it, when `facts` (what conditions
    /// see of the call) are given and grants are on ([`Self::by_grant`]); else find or create
    /// its request, wait for a decision up to the wait timeout (calling `progress` now and
    /// then), and consume an approval. Any error means the call must not run; so does an
    /// apiserver that has not answered [`API_GRACE`] after the wait timeout.
    pub async fn resolve(
        &self,
        call: &GatedCall,
        facts: Option<&Activation>,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Resolution> {
        let bound = self.wait + API_GRACE;
        let _awaiting = self.metrics.awaiting_decision();
        let resolution = async {
            if let Some(facts) = facts
                && let Some(name) = self.by_grant(call, facts).await?
            {
                return Ok(Resolution::Granted { name });
            }
            self.resolve_unbounded(call, progress).await
        };
        tokio::time::timeout(bound, resolution)
            .await
            .unwrap_or(Err(Error::ApiTimeout {
                waited: bound.as_secs(),
                grace: API_GRACE.as_secs(),
            }))
    }

    async fn resolve_unbounded(
        &self,
        call: &GatedCall,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Resolution> {
        let (mut req, previous) = self.find_or_create(call).await?;
        let name = req.metadata.name.clone().unwrap_or_default();
        let wait_until = Instant::now() + self.wait;
        loop {
            let now = self.clock.now();
            match decide(&req, &call.key, &self.identity(), now) {
                Verdict::Refuse(refusal) => {
                    if let Refusal::Untrusted(why) = &refusal {
                        tracing::warn!(request = %name, %why, "refusing an ApprovalRequest the gate does not trust");
                    }
                    return Ok(Resolution::Refused { name, refusal });
                }
                Verdict::Forward => {
                    if let Some(why) = self.freeze.refusal(FREEZE_BOUND).await {
                        let refusal = Refusal::Frozen(why);
                        return Ok(Resolution::Refused { name, refusal });
                    }
                    if req.spec.edit.is_some() {
                        return Ok(Resolution::Edited {
                            request: Box::new(req),
                        });
                    }
                    let message = format!("Approved call forwarded by {}", self.pod);
                    let identity = self.identity();
                    // Claimed only while the request, as the apiserver now has it, still lets
                    // the call through; otherwise it is judged again above.
                    let still_approved = |r: &ApprovalRequest| {
                        matches!(
                            decide(r, &call.key, &identity, self.clock.now()),
                            Verdict::Forward
                        )
                    };
                    match self.consume(req, &message, None, still_approved).await? {
                        Guarded::Written(_) => return Ok(Resolution::Approved { name }),
                        Guarded::Declined(fresh) => req = *fresh,
                        Guarded::Gone => return Err(Error::RequestDeleted { name }),
                        Guarded::Contended => {
                            return Err(Error::Contended {
                                kind: "ApprovalRequest",
                                name,
                                attempts: MAX_CONFLICTS,
                            });
                        }
                    }
                }
                Verdict::Wait if Instant::now() >= wait_until => {
                    return Ok(Resolution::Pending {
                        name,
                        previous: previous.map(Box::new),
                    });
                }
                Verdict::Wait => {
                    let expires_in = req.spec.expires_at.0.duration_since(now).unsigned_abs();
                    let deadline = wait_until.min(Instant::now() + expires_in);
                    let next = tokio::select! {
                        next = self.next_change(&req, deadline, progress) => next?,
                        why = self.freeze.frozen() => {
                            let refusal = Refusal::Frozen(why);
                            return Ok(Resolution::Refused { name, refusal });
                        }
                    };
                    req = match next {
                        Some(next) => next,
                        // The wait or the request's lifetime ended: read it once more, decide.
                        None => self.api.get(&name).await?,
                    };
                }
            }
        }
    }

    /// The live request of `call`, created if needed, and the latest finished one before it.
    /// None is created while the agent is at its cap of open requests
    /// ([`Error::OpenRequestCap`]) or the gate cannot count them ([`Error::OpenRequestsUnknown`]).
    pub async fn find_or_create(
        &self,
        call: &GatedCall,
    ) -> Result<(ApprovalRequest, Option<ApprovalRequest>)> {
        let mut selector = format!(
            "{LABEL_AGENT}={},{LABEL_TOOL}={},{LABEL_ARGS_HASH}={}",
            label_value(&call.key.agent),
            label_value(&call.key.tool),
            call.digest.short()
        );
        if let Some(caller) = &call.key.caller {
            selector.push_str(&format!(",{LABEL_CALLER_HASH}={}", caller_label(caller)));
        }
        let base = base_name(&call.key);
        let now = self.clock.now();
        let mine: Vec<ApprovalRequest> = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .filter(|r| call.key.matches(r))
            .filter(|r| generation(r, &base).is_some())
            .collect();
        let identity = self.identity();
        let mine: Vec<ApprovalRequest> = mine
            .into_iter()
            .filter(|r| match self.unfaithful(r, call) {
                Some(why) => {
                    tracing::warn!(request = %r.metadata.name.as_deref().unwrap_or_default(), %why,
                        "ignoring an ApprovalRequest this gate did not write");
                    false
                }
                None => true,
            })
            .collect();
        for r in &mine {
            if let Verdict::Refuse(Refusal::Untrusted(why)) = decide(r, &call.key, &identity, now) {
                tracing::warn!(request = %r.metadata.name.as_deref().unwrap_or_default(), %why,
                    "ignoring an ApprovalRequest the gate does not trust");
            }
        }
        if let Some(live) = mine.iter().find(|r| is_live(r, &call.key, &identity, now)) {
            return Ok((live.clone(), None));
        }
        let mut next = mine
            .iter()
            .filter_map(|r| generation(r, &base))
            .max()
            .map_or(0, |g| g + 1);
        let previous = mine.into_iter().max_by_key(|r| {
            let created = r.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (created, generation(r, &base))
        });
        let slot = self.open.reserve(now, call.key.caller.as_deref()).await?;
        self.take_budget()?;
        // A manager name of its own, so that no approver's writes merge into the creator's
        // managedFields entry (which would make their approval look written at creation).
        let post = PostParams {
            field_manager: Some(field_manager::GATE.into()),
            ..Default::default()
        };
        for _ in 0..MAX_CREATE_ATTEMPTS {
            let req = self.build(call, &format!("{base}-{next}"))?;
            let asked_at = self.clock.now();
            match self.api.create(&post, &req).await {
                Ok(created) => {
                    tracing::info!(request = %created.metadata.name.as_deref().unwrap_or_default(),
                        tool = %call.key.tool, args_hash = %call.digest.binding, "created ApprovalRequest");
                    slot.created(&created);
                    warn_on_skew(&created, asked_at);
                    return Ok((created, previous));
                }
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    let existing = self.api.get(&format!("{base}-{next}")).await?;
                    let ours =
                        call.key.matches(&existing) && self.unfaithful(&existing, call).is_none();
                    if ours && is_live(&existing, &call.key, &identity, self.clock.now()) {
                        return Ok((existing, previous));
                    }
                    next = if ours {
                        next + 1
                    } else {
                        // Squatted: another generation, one nobody can know in advance.
                        tracing::warn!(request = %format!("{base}-{next}"), "a request this gate did not write holds the name; skipping to a random generation");
                        u64::from(getrandom::u32()?)
                    };
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::CreateRace { name: base })
    }

    /// Why `req` is not what this gate would have written for `call`, if it is not: its
    /// preview, message or size differ from the call's, or its `expiresAt` lies further from its
    /// creation (by the apiserver's clock) than the approval timeout allows. Such a request was
    /// written by someone else, and is never reused (its approval could be for what it shows).
    fn unfaithful(&self, req: &ApprovalRequest, call: &GatedCall) -> Option<String> {
        let shown = req.spec.arguments_preview.as_deref();
        if !shown.is_some_and(|shown| {
            same_json(
                &Value::Object(shown.clone()),
                &Value::Object(call.preview.clone()),
            )
        }) {
            return Some("its argumentsPreview is not the call's".into());
        }
        if req.spec.message.as_deref() != Some(message(&call.key, &call.preview).as_str()) {
            return Some("its message is not the call's".into());
        }
        if usize::try_from(req.spec.arguments_bytes).ok() != Some(call.digest.bytes) {
            return Some("its argumentsBytes is not the call's".into());
        }
        let Some(created) = req.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
            return Some("it has no creationTimestamp".into());
        };
        let latest = created
            .checked_add(self.timeout)
            .and_then(|t| t.checked_add(CLOCK_SKEW))
            .unwrap_or(Timestamp::MAX);
        (req.spec.expires_at.0 > latest).then(|| {
            format!(
                "its expiresAt {} lies more than the approval timeout after its creation at {created}",
                req.spec.expires_at.0
            )
        })
    }

    /// The ApprovalRequest object for `call`.
    fn build(&self, call: &GatedCall, name: &str) -> Result<ApprovalRequest> {
        let key = &call.key;
        let preview = call.preview.clone();
        let now = self.clock.now();
        let expires_at = now.checked_add(self.timeout).unwrap_or(Timestamp::MAX);
        let message = message(key, &preview);
        let owner_references = (!self.agent.uid.is_empty()).then(|| {
            vec![OwnerReference {
                api_version: format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
                kind: self.agent.kind.as_str().into(),
                name: self.agent.name.clone(),
                uid: self.agent.uid.clone(),
                ..Default::default()
            }]
        });
        let mut req = ApprovalRequest::new(
            name,
            ApprovalRequestSpec {
                agent_ref: AgentRef {
                    name: key.agent.clone(),
                    kind: (key.kind != PolicyKind::Agent).then_some(key.kind),
                },
                caller: call.caller.clone().map(Box::new),
                tool_server: ToolServerRef {
                    kind: key.server_kind,
                    name: key.server_name.clone(),
                    namespace: key.server_namespace.clone(),
                },
                tool_name: key.tool.clone(),
                arguments_preview: Some(Box::new(preview)),
                arguments_sha256: call.digest.binding.clone(),
                arguments_bytes: i64::try_from(call.digest.bytes).unwrap_or(i64::MAX),
                requested_by: self.identity(),
                message: Some(message),
                context: Some(call.context.clone()),
                rule: call.rule.clone(),
                // Omitted for one approval, so requests look as they did before quorum.
                required_approvals: (key.required_approvals > 1)
                    .then(|| i32::try_from(key.required_approvals).unwrap_or(i32::MAX)),
                approvals: Vec::new(),
                expires_at: Time(expires_at),
                grant: None,
                decision: None,
                edit: None,
                edit_approvals: Vec::new(),
                escalation: call
                    .escalation
                    .as_ref()
                    .or(self.escalation.as_ref())
                    .map(|e| Box::new(RequestEscalation::at(e, now, expires_at))),
                tool_annotations: call
                    .tool_annotations
                    .as_deref()
                    .map(|a| Box::new(a.clone())),
            },
        );
        let mut labels: std::collections::BTreeMap<String, String> = [
            (LABEL_AGENT.to_string(), label_value(&key.agent)),
            (LABEL_TOOL.to_string(), label_value(&key.tool)),
            (LABEL_ARGS_HASH.to_string(), call.digest.short().to_string()),
        ]
        .into();
        if let Some(caller) = &key.caller {
            labels.insert(LABEL_CALLER_HASH.to_string(), caller_label(caller));
        }
        req.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.agent.namespace.clone()),
            labels: Some(labels),
            owner_references,
            ..Default::default()
        };
        Ok(req)
    }

    /// Waits for the next version of `req` until `deadline`, calling `progress` on the way.
    /// `None` when the deadline passed first.
    async fn next_change(
        &self,
        req: &ApprovalRequest,
        deadline: Instant,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Option<ApprovalRequest>> {
        let name = req.metadata.name.clone().unwrap_or_default();
        let rv = req.metadata.resource_version.clone().unwrap_or_default();
        // An upper bound only: the deadline below ends the wait.
        let secs = self.wait.as_secs().clamp(1, 290) as u32;
        let params = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(secs);
        let mut events = self.api.watch(&params, &rv).await?.boxed();
        let waiting = format!(
            "Waiting for approval: ApprovalRequest {name} in namespace {}",
            self.agent.namespace
        );
        progress(&waiting);
        let mut tick =
            tokio::time::interval_at(Instant::now() + self.progress_every, self.progress_every);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
                _ = tick.tick() => progress(&waiting),
                event = events.try_next() => match event? {
                    Some(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => return Ok(Some(obj)),
                    Some(WatchEvent::Deleted(_)) => return Err(Error::RequestDeleted { name }),
                    Some(WatchEvent::Bookmark(_)) => {}
                    // 410 Gone (history compacted) or any other watch error: read afresh.
                    Some(WatchEvent::Error(status)) => {
                        tracing::info!(request = %name, code = status.code, "watch error; re-reading");
                        pause(deadline).await;
                        return match self.api.get_opt(&name).await? {
                            Some(obj) => Ok(Some(obj)),
                            None => Err(Error::RequestDeleted { name }),
                        };
                    }
                    // The server closed the watch (its timeout): read afresh, watch again.
                    None => {
                        pause(deadline).await;
                        match self.api.get_opt(&name).await? {
                            None => return Err(Error::RequestDeleted { name }),
                            Some(obj) if obj.metadata.resource_version != req.metadata.resource_version => {
                                return Ok(Some(obj));
                            }
                            Some(_) if Instant::now() >= deadline => return Ok(None),
                            Some(_) => events = self.api.watch(&params, &rv).await?.boxed(),
                        }
                    }
                },
            }
        }
    }

    /// Consumes the edited approval `req` (a [`Resolution::Edited`] of `key`) for the edited
    /// call, whose binding hash is `edited`: recorded in `status.editedArgumentsSha256` in the
    /// same guarded write as `consumedAt`, and only while the request, as the apiserver has it,
    /// still approves the same edit. `Approved` when this gate consumed it, `Refused` when the
    /// request no longer lets the call run.
    pub async fn consume_edited(
        &self,
        req: ApprovalRequest,
        key: &CallKey,
        edited: &str,
    ) -> Result<Resolution> {
        let name = req.metadata.name.clone().unwrap_or_default();
        let edit = req.spec.edit.clone();
        let editor = edit
            .as_ref()
            .map(|e| e.edited_by.clone())
            .unwrap_or_default();
        let message = format!(
            "Approved call, edited by {editor}, forwarded by {} with the edited arguments",
            self.pod
        );
        let identity = self.identity();
        let same_edit = |r: &ApprovalRequest| {
            r.spec.edit == edit
                && matches!(
                    decide(r, key, &identity, self.clock.now()),
                    Verdict::Forward
                )
        };
        match self.consume(req, &message, Some(edited), same_edit).await? {
            Guarded::Written(_) => Ok(Resolution::Approved { name }),
            Guarded::Declined(fresh) => {
                let refusal = match decide(&fresh, key, &identity, self.clock.now()) {
                    Verdict::Refuse(refusal) => refusal,
                    _ => Refusal::Malformed(
                        "its edit changed while the gate was consuming it".into(),
                    ),
                };
                Ok(Resolution::Refused { name, refusal })
            }
            Guarded::Gone => Err(Error::RequestDeleted { name }),
            Guarded::Contended => Err(Error::Contended {
                kind: "ApprovalRequest",
                name,
                attempts: MAX_CONFLICTS,
            }),
        }
    }

    /// Finishes the edited request `req` (of `key`) without running anything, because the gate
    /// refused its edit (`why` names the path and the reason): phase Cancelled, the reason in
    /// `status.message` (the controller records it in its Finished condition and an Event).
    /// Written only while the request still
    /// approves the call (so never over a consumption); otherwise nothing is written.
    pub async fn refuse_edit(&self, req: ApprovalRequest, key: &CallKey, why: &str) -> Result<()> {
        let name = req.metadata.name.clone().unwrap_or_default();
        let editor = req
            .spec
            .edit
            .as_ref()
            .map(|e| e.edited_by.clone())
            .unwrap_or_default();
        let message: String = format!(
            "The edit by {editor} was refused by the gate {}: {why}. The call did not run.",
            self.pod
        )
        .chars()
        .take(4096)
        .collect();
        let identity = self.identity();
        let outcome = GuardedWrite::status(&self.api, field_manager::GATE, MAX_CONFLICTS)
            .write(req, |current| {
                if !matches!(
                    decide(current, key, &identity, self.clock.now()),
                    Verdict::Forward
                ) {
                    return Err(());
                }
                let now = Time(self.clock.now());
                let recorded = current.status.as_ref().and_then(|s| s.decided_at.clone());
                Ok(ApprovalRequestStatus {
                    phase: Some(Phase::Cancelled),
                    decided_at: recorded.is_none().then(|| now.clone()),
                    message: Some(message.clone()),
                    ..ApprovalRequestStatus::default()
                })
            })
            .await?;
        tracing::info!(request = %name, %why, written = matches!(outcome.guarded, Guarded::Written(_)),
            "the approver's edit was refused; the call did not run");
        Ok(())
    }

    /// Marks `req` consumed by this gate, saying `message`, with the one guarded status write:
    /// only over the resourceVersion it was judged at, and only while `claimable` holds of the
    /// request as the apiserver has it (after a 409 Conflict it is read again and judged
    /// again; a request no longer claimable comes back `Declined` with its fresh version).
    async fn consume(
        &self,
        req: ApprovalRequest,
        message: &str,
        edited: Option<&str>,
        claimable: impl Fn(&ApprovalRequest) -> bool,
    ) -> Result<Guarded<ApprovalRequest, Box<ApprovalRequest>>> {
        let name = req.metadata.name.clone().unwrap_or_default();
        let sent = Instant::now();
        let outcome = GuardedWrite::status(&self.api, field_manager::GATE, MAX_CONFLICTS)
            .write(req, |current| {
                if !claimable(current) {
                    return Err(Box::new(current.clone()));
                }
                let now = Time(self.clock.now());
                let recorded = current.status.as_ref().and_then(|s| s.decided_at.clone());
                Ok(ApprovalRequestStatus {
                    phase: Some(Phase::Executed),
                    decided_at: recorded.is_none().then(|| now.clone()),
                    consumed_at: Some(now),
                    consumed_by: Some(self.pod.clone()),
                    message: Some(message.to_owned()),
                    edited_arguments_sha256: edited.map(str::to_owned),
                    ..ApprovalRequestStatus::default()
                })
            })
            .await?;
        for _ in 0..outcome.conflicts {
            self.metrics.claim_conflict();
        }
        if outcome.conflicts > 0 {
            tracing::info!(request = %name, conflicts = outcome.conflicts, "request changed while consuming; re-read");
        }
        if matches!(outcome.guarded, Guarded::Written(_)) {
            let claim_ms = sent.elapsed().as_secs_f64() * 1e3;
            tracing::info!(request = %name, consumed_by = %self.pod, claim_ms, "approval consumed");
        }
        Ok(outcome.guarded)
    }
}

/// Warns when the apiserver's creation time of a request differs from the gate's clock at the
/// create call by more than [`CLOCK_SKEW`]: `expiresAt` is set by the gate's clock.
fn warn_on_skew(created: &ApprovalRequest, asked_at: Timestamp) {
    if let Some(server) = created.metadata.creation_timestamp.as_ref() {
        let skew = server.0.duration_since(asked_at);
        if skew.abs() > CLOCK_SKEW {
            tracing::warn!(
                skew_seconds = skew.as_secs(),
                "the gate's clock differs from the apiserver's; expiresAt is set by the gate's clock"
            );
        }
    }
}

/// Whether two JSON values are equal as the apiserver stores them: it keeps integers that fit
/// 64 bits and turns every other number into a double, so numbers compare as doubles.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// A short pause before re-reading after a watch ended, so a misbehaving apiserver is not
/// hammered; never past `deadline`.
async fn pause(deadline: Instant) {
    tokio::time::sleep_until(deadline.min(Instant::now() + Duration::from_millis(200))).await;
}

/// `<agent>-<tool>-<h>`: the name of a call's requests without the generation. A shared
/// gate's hash covers its kind and the caller too (an Agent's stays as it was, so its
/// requests keep their names across upgrades).
pub fn base_name(key: &CallKey) -> String {
    let mut h = Sha256::new();
    for part in [
        key.agent.as_str(),
        key.server_kind.as_str(),
        key.server_namespace.as_str(),
        key.server_name.as_str(),
        key.tool.as_str(),
        key.binding.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    if let Some(caller) = &key.caller {
        for part in [key.kind.as_str(), caller.as_str()] {
            h.update(part.as_bytes());
            h.update([0]);
        }
    }
    let h = hex::encode(h.finalize());
    format!(
        "{}-{}-{}",
        dns_part(&key.agent, 40),
        dns_part(&key.tool, 40),
        &h[..16]
    )
}

/// The generation of `req` if its name is `<base>-<n>`.
fn generation(req: &ApprovalRequest, base: &str) -> Option<u64> {
    req.metadata
        .name
        .as_deref()?
        .strip_prefix(base)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// Lowercase DNS-label characters of `s`, at most `max` long, never empty.
fn dns_part(s: &str, max: usize) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed: String = mapped.trim_matches('-').chars().take(max).collect();
    let trimmed = trimmed.trim_end_matches('-');
    if trimmed.is_empty() {
        "x".into()
    } else {
        trimmed.into()
    }
}

/// `s` made a valid label value (at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends).
pub fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The question shown to approvers, built from the redacted preview only. It starts with the
/// redaction notice when the preview hides anything, so nobody approves blind.
fn message(key: &CallKey, preview: &serde_json::Map<String, serde_json::Value>) -> String {
    let args = serde_json::to_string(preview).unwrap_or_default();
    let note = redact::notice(preview)
        .map(|n| format!("NOTE: {n} "))
        .unwrap_or_default();
    let head = format!(
        "{note}Run '{}' on {} {}/{} with arguments ",
        key.tool,
        key.server_kind.as_str(),
        key.server_namespace,
        key.server_name
    );
    let room = MAX_MESSAGE_CHARS.saturating_sub(head.chars().count() + 2);
    let args = if args.chars().count() > room {
        let cut: String = args.chars().take(room.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        args
    };
    format!("{head}{args}?")
}

#[cfg(test)]
mod tests;
