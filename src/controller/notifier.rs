//! ApprovalNotifier: the reconciler that checks a notifier's channel (condition `Ready`), and
//! the delivery of its messages, which the ApprovalRequest reconciler drives ([`deliver`]).
//!
//! Delivery is at most once per attempt: each attempt is recorded in the request's
//! `status.notifications` with a resourceVersion-guarded write before it is sent, and its
//! outcome after. A new leader, or a reconcile working from a cache that is behind, sees the
//! record (or loses the guarded write) and does not send again; an attempt recorded without an
//! outcome counts as failed and is retried after the backoff. Decisions never wait for any of
//! it: the gate watches its own request.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::core::Selector;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::watches::NotifierWatches;
use super::{Context, drain, measured, retry_after_error};
use crate::api::approval_notifier::{
    ApprovalNotifierSpec, ApprovalNotifierStatus, ChannelType, Delivery,
};
use crate::api::approval_request::{ApprovalRequestStatus, NotificationRecord};
use crate::api::{ApprovalNotifier, ApprovalRequest, Phase};
use crate::apiserver::field_manager;
use crate::apiserver::guarded::{Guarded, GuardedWrite};
use crate::apiserver::{apply_status, new_condition, set_condition};
use crate::notify::plan::{self, Attempt, Event};
use crate::notify::{message, send};
use crate::{Result, egress};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "approvalnotifier";
/// The condition saying whether messages can be sent.
pub const READY: &str = "Ready";
/// How often a notifier's channel is checked again, and a delivery that could not start
/// (unreadable channel, API error) is tried again.
pub const RECHECK: Duration = Duration::from_secs(60);
/// Guarded writes retried after a conflict.
const WRITE_TRIES: usize = 3;

/// Why a notifier's messages cannot be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The condition's reason.
    pub reason: &'static str,
    /// What to fix.
    pub message: String,
}

fn problem(reason: &'static str, message: String) -> Problem {
    Problem { reason, message }
}

/// The URL of `spec`'s channel, from its Secret in `namespace`, as that namespace's pods reach
/// it ([`egress::as_namespace_pods_reach`]). Never put in a message: it is a credential.
pub async fn channel_url(
    client: &kube::Client,
    namespace: &str,
    spec: &ApprovalNotifierSpec,
) -> std::result::Result<String, Problem> {
    let source = &spec.channel.url_from;
    let field = "spec.channel.urlFrom";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match secrets.get_opt(&source.name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(problem(
                "SecretNotFound",
                format!("{field}: Secret {namespace}/{} not found", source.name),
            ));
        }
        Err(e) => {
            return Err(problem(
                "SecretUnreadable",
                format!("{field}: Secret {namespace}/{}: {e}", source.name),
            ));
        }
    };
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&source.key)) else {
        return Err(problem(
            "KeyNotFound",
            format!(
                "{field}: Secret {namespace}/{} has no key {}",
                source.name, source.key
            ),
        ));
    };
    let url = std::str::from_utf8(&bytes.0).unwrap_or_default().trim();
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
            Ok(egress::as_namespace_pods_reach(url, namespace).into_owned())
        }
        _ => Err(problem(
            "InvalidURL",
            format!(
                "{field}: key {} of Secret {namespace}/{} is not an http(s) URL",
                source.key, source.name
            ),
        )),
    }
}

/// Why `spec` cannot select any request, if its agent selector does not parse.
fn selector_problem(spec: &ApprovalNotifierSpec) -> Option<Problem> {
    let selector = spec.agent_selector.clone()?;
    Selector::try_from(selector)
        .err()
        .map(|e| problem("InvalidSpec", format!("spec.agentSelector: {e}")))
}

/// The ApprovalNotifier controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: NotifierWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let controller = Controller::for_shared_stream(watches.notifiers, ctx.stores.notifiers.clone())
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

/// Reconciles one ApprovalNotifier: records whether its channel can be used.
pub async fn reconcile(notifier: Arc<ApprovalNotifier>, ctx: Arc<Context>) -> Result<Action> {
    measured(
        &ctx,
        CONTROLLER,
        notifier.as_ref(),
        reconcile_inner(&notifier, &ctx),
    )
    .await
}

async fn reconcile_inner(notifier: &ApprovalNotifier, ctx: &Context) -> Result<Action> {
    let namespace = notifier.namespace().unwrap_or_default();
    let checked = match selector_problem(&notifier.spec) {
        Some(problem) => Err(problem),
        None => channel_url(&ctx.client, &namespace, &notifier.spec)
            .await
            .map(|_| ()),
    };
    let generation = notifier.meta().generation;
    let now = ctx.clock.now();
    let condition = match checked {
        Ok(()) => new_condition(
            READY,
            true,
            "ChannelReady",
            format!(
                "{} messages go to the URL in Secret {}, key {}",
                notifier.spec.channel.channel_type.as_str(),
                notifier.spec.channel.url_from.name,
                notifier.spec.channel.url_from.key
            ),
            generation,
            now,
        ),
        Err(problem) => new_condition(
            READY,
            false,
            problem.reason,
            problem.message,
            generation,
            now,
        ),
    };
    let current = notifier.status.clone().unwrap_or_default();
    let mut conditions = current.conditions.clone();
    set_condition(&mut conditions, condition);
    if conditions != current.conditions || current.observed_generation != generation {
        // Only the fields this reconciler owns: the delivery counters are the deliveries'.
        let status = ApprovalNotifierStatus {
            observed_generation: generation,
            conditions,
            ..ApprovalNotifierStatus::default()
        };
        let api: Api<ApprovalNotifier> = Api::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, notifier, &status).await?;
    }
    Ok(Action::requeue(RECHECK))
}

/// Sends what is due for `request` (from the cache, which holds no arguments preview) in
/// `phase`, made under an Agent or ToolGate with `labels` (which `agentSelector` matches;
/// `None`: it is gone): one attempt of one message per call, since each attempt's
/// record is a write that brings the next reconcile. Returns when to look again (a backoff
/// ending, the next reminder), if ever. Failures are logged and retried, never returned: a
/// channel never holds up the request's own reconcile.
pub async fn deliver(
    ctx: &Context,
    request: &ApprovalRequest,
    phase: Phase,
    labels: Option<&BTreeMap<String, String>>,
    now: Timestamp,
) -> Option<Timestamp> {
    let namespace = request.namespace()?;
    let in_namespace: Vec<Arc<ApprovalNotifier>> = ctx
        .stores
        .notifiers
        .state()
        .into_iter()
        .filter(|n| n.namespace().as_deref() == Some(namespace.as_str()))
        .collect();
    let mut notifiers: Vec<Arc<ApprovalNotifier>> = in_namespace
        .iter()
        .filter(|n| plan::covers(&n.spec, request, labels))
        .cloned()
        .collect();
    notifiers.sort_by_key(|n| n.name_any());
    let records = request
        .status
        .as_ref()
        .map_or(&[][..], |s| s.notifications.as_slice());
    let mut wake = plan::next_warning(request, phase, now);
    let mut due: Vec<(Arc<ApprovalNotifier>, Event)> = Vec::new();
    for notifier in notifiers {
        wake = earliest(
            wake,
            plan::next_reminder(&notifier.spec, request, phase, now),
        );
        if let Some(event) = plan::due(&notifier.spec, request, phase, now) {
            due.push((notifier, event));
        }
    }
    // Each escalation step taken tells its own notifier, whatever that one selects.
    for (name, event) in plan::escalated(request, phase) {
        match in_namespace.iter().find(|n| n.name_any() == name) {
            Some(notifier) => due.push((notifier.clone(), event)),
            None => {
                tracing::warn!(notifier = %name, request = %request.name_any(), event = %event.key(), "escalation notifier not found; not sent");
            }
        }
    }
    for (notifier, event) in due {
        let name = notifier.name_any();
        let record = records
            .iter()
            .find(|r| r.notifier == name && r.event == event.key());
        let next = plan::next_attempt(record, notifier.spec.attempts(), now);
        tracing::debug!(notifier = %name, request = %request.name_any(), event = %event.key(), ?next, "notification due");
        match next {
            Attempt::Delivered | Attempt::GivenUp => {}
            Attempt::At(at) => wake = earliest(wake, Some(at)),
            Attempt::Now(_) => {
                let recheck = now + SignedDuration::try_from(RECHECK).unwrap_or_default();
                match attempt(ctx, &notifier, request, event, phase, now).await {
                    Ok(true) => return earliest(wake, Some(now + SignedDuration::from_secs(1))),
                    Ok(false) => wake = earliest(wake, Some(recheck)),
                    Err(error) => {
                        tracing::warn!(notifier = %name, request = %request.name_any(), %error, "notification not attempted; retrying");
                        wake = earliest(wake, Some(recheck));
                    }
                }
            }
        }
    }
    wake
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One attempt at `event` for the request `cached` names: re-read it, record the attempt with
/// a guarded write, send, record the outcome. Whether an attempt was made: not when the
/// channel cannot be used (its Ready condition says why) or the request changed meanwhile.
async fn attempt(
    ctx: &Context,
    notifier: &ApprovalNotifier,
    cached: &ApprovalRequest,
    event: Event,
    phase: Phase,
    now: Timestamp,
) -> Result<bool> {
    let namespace = cached.namespace().unwrap_or_default();
    let notifier_name = notifier.name_any();
    let spec = &notifier.spec;
    let url = match channel_url(&ctx.client, &namespace, spec).await {
        Ok(url) => url,
        Err(problem) => {
            // The notifier's Ready condition says why; nothing is attempted or counted.
            tracing::debug!(notifier = %notifier_name, reason = problem.reason, "channel unusable");
            return Ok(false);
        }
    };
    let api: Api<ApprovalRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(request) = api.get_opt(&cached.name_any()).await? else {
        return Ok(false);
    };
    // The cache may be behind (even behind this controller's own last write): decide again on
    // what was just read, and write only if that is still the latest.
    let mut records = records_of(&request);
    let index = records
        .iter()
        .position(|r| r.notifier == notifier_name && r.event == event.key());
    let Attempt::Now(n) = plan::next_attempt(index.map(|i| &records[i]), spec.attempts(), now)
    else {
        return Ok(false);
    };
    let started = NotificationRecord {
        notifier: notifier_name.clone(),
        event: event.key(),
        attempts: i32::try_from(n).unwrap_or(i32::MAX),
        last_attempt_at: Some(Time(now)),
        delivered_at: None,
        last_error: index.and_then(|i| records[i].last_error.clone()),
    };
    match index {
        Some(i) => records[i] = started,
        None => records.push(started),
    }
    let Some(written) = write_records(&api, &request, &records).await? else {
        // Changed since it was read: the next reconcile decides again.
        tracing::debug!(notifier = %notifier_name, request = %request.name_any(), "request changed before the attempt; not sent");
        return Ok(false);
    };

    let body = match spec.channel.channel_type {
        ChannelType::Webhook => message::cloud_event(&request, event, phase, now),
        ChannelType::Slack => {
            message::slack(&request, event, phase, spec.channel.buttons == Some(true))
        }
    };
    let outcome = send::post(&ctx.notify_http, spec.channel.channel_type, &url, &body).await;
    let finished = ctx.clock.now();
    let given_up = outcome.is_err() && n >= spec.attempts();
    ctx.metrics.notified(match (&outcome, given_up) {
        (Ok(()), _) => "delivered",
        (Err(_), false) => "failed",
        (Err(_), true) => "given_up",
    });
    match &outcome {
        Ok(()) => {
            tracing::info!(notifier = %notifier_name, request = %request.name_any(), event = %event.key(), attempt = n, "notification delivered")
        }
        Err(error) => {
            tracing::warn!(notifier = %notifier_name, request = %request.name_any(), event = %event.key(), attempt = n, %error, "notification failed")
        }
    }
    record_outcome(&api, written, &notifier_name, event, n, &outcome, finished).await?;
    if outcome.is_ok() || given_up {
        let delivery = Delivery {
            request: request.name_any(),
            event: event.key(),
            at: Time(finished),
            error: outcome.clone().err(),
        };
        record_on_notifier(ctx, notifier, delivery, given_up).await?;
    }
    if let (true, Err(error)) = (given_up, &outcome) {
        let note = format!(
            "gave up {} about ApprovalRequest {} after {n} attempts: {error}",
            event.key(),
            request.name_any()
        );
        let targets = [notifier.object_ref(&())];
        ctx.publish(
            EventType::Warning,
            "DeliveryFailed",
            note,
            "Notify",
            &targets,
        )
        .await;
    }
    Ok(true)
}

fn records_of(request: &ApprovalRequest) -> Vec<NotificationRecord> {
    request
        .status
        .as_ref()
        .map(|s| s.notifications.clone())
        .unwrap_or_default()
}

/// Writes `records` as the request's `status.notifications`, only over the resourceVersion it
/// was read at. `None` when someone wrote the request since.
async fn write_records(
    api: &Api<ApprovalRequest>,
    request: &ApprovalRequest,
    records: &[NotificationRecord],
) -> Result<Option<ApprovalRequest>> {
    let outcome = GuardedWrite::status(api, field_manager::NOTIFIER, 1)
        .write(request.clone(), |_| {
            Ok::<_, ()>(ApprovalRequestStatus {
                notifications: records.to_vec(),
                ..ApprovalRequestStatus::default()
            })
        })
        .await?;
    Ok(match outcome.guarded {
        Guarded::Written(written) => Some(written),
        Guarded::Declined(()) | Guarded::Gone | Guarded::Contended => None,
    })
}

/// Records the outcome of attempt `n` on the request, re-reading it after a conflict. Left
/// unrecorded (the request changed every time, or is gone), the attempt counts as failed.
async fn record_outcome(
    api: &Api<ApprovalRequest>,
    request: ApprovalRequest,
    notifier: &str,
    event: Event,
    n: u32,
    outcome: &std::result::Result<(), String>,
    at: Timestamp,
) -> Result<()> {
    let attempts = u32::try_from(WRITE_TRIES).unwrap_or(u32::MAX);
    GuardedWrite::status(api, field_manager::NOTIFIER, attempts)
        .write(request, |current| {
            let mut records = records_of(current);
            let record = records
                .iter_mut()
                .find(|r| r.notifier == notifier && r.event == event.key())
                .filter(|r| u32::try_from(r.attempts) == Ok(n))
                .ok_or(())?;
            match outcome {
                Ok(()) => record.delivered_at = Some(Time(at)),
                Err(error) => record.last_error = Some(error.clone()),
            }
            Ok::<_, ()>(ApprovalRequestStatus {
                notifications: records,
                ..ApprovalRequestStatus::default()
            })
        })
        .await?;
    Ok(())
}

/// Counts a delivered or given-up message in the notifier's status, with its last one.
async fn record_on_notifier(
    ctx: &Context,
    notifier: &ApprovalNotifier,
    delivery: Delivery,
    given_up: bool,
) -> Result<()> {
    let api: Api<ApprovalNotifier> = Api::namespaced(
        ctx.client.clone(),
        &notifier.namespace().unwrap_or_default(),
    );
    let Some(current) = api.get_opt(&notifier.name_any()).await? else {
        return Ok(());
    };
    let attempts = u32::try_from(WRITE_TRIES).unwrap_or(u32::MAX);
    GuardedWrite::status(&api, field_manager::NOTIFIER, attempts)
        .write(current, |current| {
            let status = current.status.clone().unwrap_or_default();
            Ok::<_, ()>(if given_up {
                ApprovalNotifierStatus {
                    failures: Some(status.failures.unwrap_or(0) + 1),
                    last_failure: Some(delivery.clone()),
                    ..ApprovalNotifierStatus::default()
                }
            } else {
                ApprovalNotifierStatus {
                    delivered: Some(status.delivered.unwrap_or(0) + 1),
                    last_delivery: Some(delivery.clone()),
                    ..ApprovalNotifierStatus::default()
                }
            })
        })
        .await?;
    Ok(())
}
