//! A `tools/call`, whichever transport carried it: screened by the server's policy (refused,
//! forwarded, or held), then, if held, decided by an approval while the client is told of the
//! wait, and forwarded only if approved. The transports ([`super::streamable_http`],
//! [`super::http_sse`]) supply what differs through [`Transport`]: how an answer reaches the
//! client and where the call goes upstream.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Response, Uri};
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::approval::{Asked, FREEZE_BOUND, GatedCall, Resolution};
use super::callers;
use super::continuation::{self, Continuation, Watch};
use super::decision::CallKey;
use super::edit_note::PendingNotes;
use super::edited;
use super::hash;
use super::jsonrpc::{self, ToolCall};
use super::memory::{NoTree, Tree};
use super::metrics::Outcome;
use super::outcome;
use super::policy::{PolicyCall, PolicyVerdict};
use super::redact;
use super::upstream::{Upstream, UpstreamError, UpstreamResponse};
use crate::Error;
use crate::api::approval_request::{ApprovalRequest, CallContext, Caller};
use crate::condition::{Activation, MAX_INPUT_BYTES};
use crate::edit::EditRefusal;
use crate::sse;
use crate::tool_risk::ToolFacts;

/// Events the gate queues for a client's event stream that it writes itself (a gated call's
/// progress and answer, the answers it injects into an HTTP+SSE session). A full queue holds
/// the writer back (the upstream is read no faster than the client reads); a progress
/// notification that finds it full is dropped, as progress is advisory.
pub const STREAM_QUEUE: usize = 16;

/// What a transport does its own way for a `tools/call` it received: the rest is
/// [`tools_call`].
pub trait Transport: Send + Sync + 'static {
    /// The server the call is for.
    fn upstream(&self) -> &Arc<Upstream>;

    /// The call's MCP session: the client's `Mcp-Session-Id`, or the gate's own id for an
    /// HTTP+SSE stream.
    fn session(&self) -> Option<&str>;

    /// Who made the call, verified, on a shared gate ([`super::callers`]); `None` on an
    /// Agent's gate.
    fn caller(&self) -> Option<&Caller>;

    /// The client's headers, forwarded with the call ([`Upstream::send`] drops what it must).
    fn headers(&self) -> &HeaderMap;

    /// Where the call is POSTed: the upstream's URL, or the HTTP+SSE session's endpoint.
    fn endpoint(&self) -> &Uri;

    /// The MCP revision the client's answers are written for, if it said.
    fn protocol(&self) -> Option<&str>;

    /// Where a note for a call's answer waits when the answer does not come back on the call's
    /// own request (HTTP+SSE: on the session's event stream); `None` when it does (the answer
    /// is watched: [`Watch::amend`]).
    fn pending_notes(&self) -> Option<&PendingNotes> {
        None
    }

    /// Answers the call with `error`, the JSON-RPC answer refusing it.
    fn refuse(&self, error: Vec<u8>) -> impl Future<Output = Response<Body>> + Send;

    /// Forwards a call that needs no approval (the message `body`) and relays the answer.
    fn forward(&self, call: &ToolCall, body: Bytes) -> impl Future<Output = Response<Body>> + Send;

    /// Relays the upstream's answer to a forwarded call as the answer to the client's POST;
    /// `watch` sees each message of an approved call's answer (on transports that carry
    /// answers in the response to the POST).
    fn relay(
        &self,
        resp: UpstreamResponse,
        watch: Option<Watch>,
    ) -> impl Future<Output = Response<Body>> + Send;

    /// Where a held call's progress and answer go.
    fn reply(&self, call: &ToolCall) -> Reply;

    /// Writes the upstream's answer to an approved call (`resp`, a success) into the client's
    /// event stream `queue`; `lost` makes the event saying the answer was lost; `watch` sees
    /// each message of the answer.
    fn relay_to_stream(
        &self,
        resp: UpstreamResponse,
        queue: &mpsc::Sender<Bytes>,
        lost: impl Fn(UpstreamError) -> Bytes + Send + Sync,
        watch: Watch,
    ) -> impl Future<Output = ()> + Send;
}

/// Where a held call's progress and answer go.
pub enum Reply {
    /// In the response to the client's POST, once the call is decided; no progress.
    Response,
    /// As events on a stream the client reads, written while the call waits.
    Stream {
        /// The client's event stream.
        queue: mpsc::Sender<Bytes>,
        /// The answer to the client's POST, sent at once.
        response: Response<Body>,
    },
}

/// Answers `call` (the message `body`, as the gate read it) that came on transport `t`:
/// refused (a JSON-RPC error) if its caller is over `callers.max_calls_per_minute` on a
/// shared gate; refused if the policy refuses it, forwarded if it needs no approval,
/// otherwise held until its ApprovalRequest resolves and forwarded only if approved. A call
/// that needs approval and carries `requestState` or `inputResponses` is the next round of an
/// approved call, or refused ([`continued`]).
pub async fn tools_call<T: Transport>(t: T, call: ToolCall, body: Bytes) -> Response<Body> {
    let up = t.upstream();
    if let (Some(callers), Some(caller)) = (&up.shared.callers, t.caller())
        && let Err(why) = callers.admit_call(&caller.username, Instant::now())
    {
        tracing::info!(server = %up.label, tool = %call.name, caller = %caller.username,
            "refused: the caller is over its call rate limit");
        up.shared.metrics.call(Outcome::refused);
        let error = jsonrpc::error_response(&call.id, callers::RATE_LIMITED, &why);
        return t.refuse(error).await;
    }
    let asked = match screen(up, t.session(), &call, body.len()).await {
        Screened::Refused(text) => return t.refuse(tool_error(&t, &call, &text)).await,
        Screened::Forward => return t.forward(&call, body).await,
        Screened::Ask(_) if call.continues() => return continued(t, call, body).await,
        Screened::Ask(asked) => asked,
    };
    let (queue, response) = match t.reply(&call) {
        Reply::Stream { queue, response } => (queue, response),
        Reply::Response => {
            // Boxed: the wait for an approval holds much state, which would otherwise be part
            // of (and moved with) the future of every call, gated or not.
            let gated = Box::pin(gated(
                up,
                outgoing(&t, body),
                Origin {
                    session: t.session(),
                    caller: t.caller(),
                },
                &call,
                asked,
                &|_| {},
            ));
            return match gated.await {
                GatedResult::Forwarded(resp, request, binding, note) => {
                    let watch = watch(&t, &call, binding, request).with_note(note);
                    t.relay(resp, Some(watch)).await
                }
                GatedResult::Refused(text) => t.refuse(tool_error(&t, &call, &text)).await,
            };
        }
    };
    tokio::spawn(answer_on_stream(t, call, body, asked, queue));
    response
}

/// Holds `call` until it is decided, with progress notifications (if the client asked for
/// them) and then its answer written to `queue`. If the client goes away before a decision,
/// the wait stops and nothing runs.
async fn answer_on_stream<T: Transport>(
    t: T,
    call: ToolCall,
    body: Bytes,
    asked: Asked,
    queue: mpsc::Sender<Bytes>,
) {
    let up = t.upstream();
    let count = AtomicU64::new(0);
    let progress = |msg: &str| {
        if let Some(token) = &call.progress_token {
            let n = count.fetch_add(1, Ordering::Relaxed) + 1;
            let _ = queue.try_send(sse::message(&jsonrpc::progress(token, n, msg)));
        }
    };
    let result = tokio::select! {
        r = gated(up, outgoing(&t, body), Origin { session: t.session(), caller: t.caller() }, &call, asked, &progress) => r,
        () = queue.closed() => {
            tracing::info!(server = %up.label, tool = %call.name, "client went away while waiting; not forwarded");
            return;
        }
    };
    let text = match result {
        GatedResult::Forwarded(resp, request, binding, note) if resp.status().is_success() => {
            let watch = watch(&t, &call, binding, request.clone()).with_note(note);
            let lost = |e: UpstreamError| {
                let why = e.tell(&up.label);
                let text = outcome::upstream_lost(&call.name, Some(&request), &why);
                sse::message(&tool_error(&t, &call, &text))
            };
            t.relay_to_stream(resp, &queue, lost, watch).await;
            return;
        }
        GatedResult::Forwarded(resp, request, _, _) => {
            let why = format!("HTTP {}", resp.status());
            outcome::upstream_failed_after_approval(&call.name, &request, &why)
        }
        GatedResult::Refused(text) => text,
    };
    let _ = queue
        .send(sse::message(&tool_error(&t, &call, &text)))
        .await;
}

/// The next round of an approved call: `call` carries the `requestState` or `inputResponses`
/// of a retry after an `input_required` answer. It is forwarded, without asking, only if it
/// takes the continuation that answer allowed (same `requestState` and session, same tool and
/// arguments: [`continuation`]); otherwise it is refused and nothing is forwarded.
async fn continued<T: Transport>(t: T, call: ToolCall, body: Bytes) -> Response<Body> {
    let up = t.upstream();
    let metrics = &up.shared.metrics;
    let tree = match call.arguments.tree().await {
        Ok(tree) => tree,
        Err(why) => {
            let text = untreed(up, &call, &why);
            return t.refuse(tool_error(&t, &call, &text)).await;
        }
    };
    let digest = hash::digest(&up.shared.key, tree.value());
    drop(tree);
    let binding = match digest {
        Ok(d) => d.binding,
        Err(e) => {
            metrics.call(Outcome::error);
            let why = format!("arguments cannot be canonicalized: {e}");
            return t
                .refuse(tool_error(&t, &call, &outcome::error(&call.name, &why)))
                .await;
        }
    };
    let caller = t.caller().map(|c| c.username.as_str());
    let taken = match call.request_state.as_deref() {
        None => up
            .continuations
            .take(None, t.session(), caller, Instant::now()),
        Some(Value::String(state)) => {
            up.continuations
                .take(Some(state), t.session(), caller, Instant::now())
        }
        Some(_) => None,
    };
    let approved_by = match continuation::check(taken, &call.name, &binding) {
        Ok(approved_by) => approved_by,
        Err(why) => {
            tracing::info!(server = %up.label, tool = %call.name, args_hash = %binding, %why,
                "refused: a retry that continues no approved call");
            metrics.call(Outcome::refused);
            let text = outcome::continuation_refused(&call.name, &why);
            return t.refuse(tool_error(&t, &call, &text)).await;
        }
    };
    let Outgoing {
        uri, headers, body, ..
    } = outgoing(&t, body);
    match up.send(Method::POST, uri, headers, body).await {
        Ok(resp) => {
            tracing::info!(server = %up.label, tool = %call.name, approved_by = %approved_by,
                "approved call continued");
            metrics.call(Outcome::continued);
            let watch = watch(&t, &call, binding, approved_by);
            t.relay(resp, Some(watch)).await
        }
        Err(e) => {
            tracing::warn!(server = %up.label, tool = %call.name, approved_by = %approved_by, error = %e,
                "upstream failed on a continued call");
            metrics.call(Outcome::error);
            let why = e.tell(&up.label);
            let text = if e.may_have_reached() {
                outcome::upstream_lost(&call.name, Some(&approved_by), &why)
            } else {
                outcome::upstream_failed_after_approval(&call.name, &approved_by, &why)
            };
            t.refuse(tool_error(&t, &call, &text)).await
        }
    }
}

/// The watch of the answer to `call`, approved by `approved_by` with arguments bound to
/// `binding`, that came on `t`.
fn watch(t: &impl Transport, call: &ToolCall, binding: String, approved_by: String) -> Watch {
    Watch::new(
        t.upstream().clone(),
        call.id.clone(),
        Continuation {
            tool: call.name.clone(),
            binding,
            session: t.session().map(String::from),
            caller: t.caller().map(|c| c.username.clone()),
            request_state: None,
            approved_by,
        },
    )
}

/// The tool error answering `call` with `text`, for the client of `t`.
fn tool_error(t: &impl Transport, call: &ToolCall, text: &str) -> Vec<u8> {
    jsonrpc::tool_error(&call.id, text, t.protocol())
}

/// The call as `t` forwards it once approved.
fn outgoing(t: &impl Transport, body: Bytes) -> Outgoing<'_> {
    Outgoing {
        uri: t.endpoint().clone(),
        headers: t.headers(),
        body,
        notes: t.pending_notes(),
    }
}

/// What the gate's policy lets a `tools/call` do; refusals are already logged and counted.
enum Screened {
    /// Not forwarded: the text for the caller.
    Refused(String),
    /// Forwarded without approval.
    Forward,
    /// Held for an approval.
    Ask(Asked),
}

/// Applies the server's policy ([`super::policy`]) to `call` of MCP session `session`, whose
/// message as the gate read it is `message_bytes` long, before anything is forwarded or asked;
/// then the Agent's freeze to a call of a tool the policy governs (in `requireApproval` or
/// named by a rule), unless a Deny rule refused it already.
async fn screen(
    up: &Upstream,
    session: Option<&str>,
    call: &ToolCall,
    message_bytes: usize,
) -> Screened {
    // The arguments as a tree only if a rule's condition may read them, for as long as it does.
    let tree = if up.policy.reads_arguments(&call.name, message_bytes) {
        match call.arguments.tree().await {
            Ok(tree) => Some(tree),
            Err(why) => return Screened::Refused(untreed(up, call, &why)),
        }
    } else {
        None
    };
    // The annotations are looked up only when a rule about the tool reads them.
    let annotations = if up.policy.reads_annotations(&call.name) {
        up.tool_definitions.facts(&call.name)
    } else {
        ToolFacts::unlisted(up.server.trust_tool_annotations)
    };
    let verdict = up.policy.decide(&PolicyCall {
        tool: &call.name,
        args: tree.as_ref().map_or(&Value::Null, Tree::value),
        message_bytes,
        session,
        annotations,
    });
    drop(tree);
    // A tool whose definition is not the accepted one asks whatever the rules allow.
    let changed = up.tool_definitions.changed(&call.name);
    let verdict = match verdict {
        PolicyVerdict::Forward { .. } if changed => {
            tracing::info!(server = %up.label, tool = %call.name,
                "the tool's definition is not the accepted one; asking for approval");
            PolicyVerdict::RequireApproval {
                rule: None,
                required_approvals: 1,
                unevaluated: None,
            }
        }
        verdict => verdict,
    };
    let metrics = &up.shared.metrics;
    let governed = !matches!(
        verdict,
        PolicyVerdict::NotOffered | PolicyVerdict::Deny { .. }
    ) && (changed || up.policy.governs(&call.name));
    if governed && let Some(why) = up.shared.approvals.freeze().refusal(FREEZE_BOUND).await {
        tracing::info!(server = %up.label, tool = %call.name, %why, "refused: agent frozen");
        metrics.call(Outcome::frozen);
        return Screened::Refused(outcome::frozen(&call.name, &why));
    }
    match verdict {
        PolicyVerdict::NotOffered => {
            tracing::info!(server = %up.label, tool = %call.name, "refused: tool not offered");
            metrics.call(Outcome::refused);
            Screened::Refused(outcome::unknown_tool(&call.name))
        }
        PolicyVerdict::Deny { rule } => {
            tracing::info!(server = %up.label, tool = %call.name, %rule, "refused by an approval rule");
            metrics.call(Outcome::denied_by_rule);
            Screened::Refused(outcome::denied_by_rule(&call.name, &rule))
        }
        PolicyVerdict::Forward { .. } => Screened::Forward,
        PolicyVerdict::RequireApproval {
            rule,
            required_approvals,
            unevaluated,
        } => {
            if let (Some(rule), Some(why)) = (&rule, &unevaluated) {
                tracing::info!(server = %up.label, tool = %call.name, %rule, %why,
                    "the rule's condition could not be evaluated; asking for approval");
            }
            Screened::Ask(Asked {
                rule,
                required_approvals,
            })
        }
    }
}

/// The refusal of a call whose arguments the gate would not build into a tree (`why`: more
/// values than it builds, or its memory budget spent).
fn untreed(up: &Upstream, call: &ToolCall, why: &NoTree) -> String {
    tracing::info!(server = %up.label, tool = %call.name, %why, "refused: no tree of the arguments");
    up.shared.metrics.call(Outcome::error);
    outcome::error(
        &call.name,
        &format!("its arguments cannot be read to decide on the call: {why}"),
    )
}

/// The end of a gated call.
enum GatedResult {
    /// Approved and forwarded: the upstream's answer, the request that approved it, the
    /// binding hash of the arguments, and the note for the result (an edited call's).
    Forwarded(UpstreamResponse, String, String, Option<String>),
    /// Not forwarded: the text for the caller.
    Refused(String),
}

/// A gated call's message as the gate forwards it, once approved.
struct Outgoing<'a> {
    /// Where: [`Transport::endpoint`].
    uri: Uri,
    /// The client's headers ([`Upstream::send`] drops what it must).
    headers: &'a HeaderMap,
    /// The call as the gate read it ([`jsonrpc::Message::body`]), so it carries the arguments
    /// that were hashed and shown.
    body: Bytes,
    /// [`Transport::pending_notes`].
    notes: Option<&'a PendingNotes>,
}

/// Where a gated call came from: its MCP session ([`Transport::session`]) and its caller
/// ([`Transport::caller`]).
struct Origin<'a> {
    session: Option<&'a str>,
    caller: Option<&'a Caller>,
}

/// Runs the approval of a gated call and forwards it (`outgoing`) if (and only if) this gate
/// consumed an approval for exactly these arguments. `origin` is where it came from; `asked`
/// says which approval rule asked and how many approvals it needs.
async fn gated(
    up: &Upstream,
    outgoing: Outgoing<'_>,
    origin: Origin<'_>,
    call: &ToolCall,
    asked: Asked,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> GatedResult {
    let metrics = &up.shared.metrics;
    let tree = match call.arguments.tree().await {
        Ok(tree) => tree,
        Err(why) => return GatedResult::Refused(untreed(up, call, &why)),
    };
    let digest = match hash::digest(&up.shared.key, tree.value()) {
        Ok(d) => d,
        Err(e) => {
            metrics.call(Outcome::error);
            return GatedResult::Refused(outcome::error(
                &call.name,
                &format!("arguments cannot be canonicalized: {e}"),
            ));
        }
    };
    let Origin { session, caller } = origin;
    let tool_annotations = up.tool_definitions.annotations(&call.name);
    let annotations = ToolFacts::of(
        tool_annotations.as_deref(),
        up.server.trust_tool_annotations,
    );
    let gated_call = GatedCall {
        key: CallKey {
            agent: up.agent.clone(),
            kind: up.shared.approvals.kind(),
            caller: caller.map(|c| c.username.clone()),
            server_kind: up.server.kind,
            server_namespace: up.server.namespace.clone(),
            server_name: up.server.name.clone(),
            tool: call.name.clone(),
            binding: digest.binding.clone(),
            required_approvals: asked.required_approvals,
        },
        digest,
        preview: redact::preview(tree.value()),
        escalation: asked.rule.as_ref().and_then(|name| {
            let rule = up.server.rules.iter().find(|r| &r.name == name)?;
            rule.escalation.clone()
        }),
        rule: asked.rule,
        context: CallContext {
            session_id: session.map(|s| s.chars().take(256).collect()),
            task_id: None,
            call_id: Some(match &call.id {
                Value::String(s) => s.chars().take(256).collect(),
                other => other.to_string().chars().take(256).collect(),
            }),
        },
        caller: caller.cloned(),
        tool_annotations,
    };
    // A grant lets a call through: it sees the annotations as an Allow rule does. No grant
    // covers a tool whose definition is not the accepted one.
    let changed = gated_call
        .tool_annotations
        .as_ref()
        .is_some_and(|a| a.definition_change.is_some());
    let facts = (up.shared.approvals.grants_enabled() && !changed).then(|| {
        Activation::new(&up.policy.facts(&PolicyCall {
            tool: &call.name,
            args: tree.value(),
            message_bytes: outgoing.body.len(),
            session,
            annotations: annotations.for_allowing(),
        }))
    });
    // The tree goes before the wait; its share of the budget stays while the conditions'
    // copy of the arguments (at most `MAX_INPUT_BYTES` of them) does.
    let _held = match &facts {
        Some(_) if outgoing.body.len() <= MAX_INPUT_BYTES => Some(tree.into_reservation()),
        _ => {
            drop(tree);
            None
        }
    };
    let mut binding = gated_call.key.binding.clone();
    let Outgoing {
        uri,
        headers,
        mut body,
        notes,
    } = outgoing;
    let mut note = None;
    let (name, kind) = match approve(up, &gated_call, facts.as_ref(), &call.name, progress).await {
        Ok(Approved::Plainly(name, kind)) => (name, kind),
        Ok(Approved::WithEdit(request)) => {
            let edited = match edited::judge(up, call, &gated_call, &request, &body, session).await
            {
                Ok(edited) => edited,
                Err(refusal) => {
                    return GatedResult::Refused(
                        refuse_edit(up, &gated_call, *request, call, &refusal).await,
                    );
                }
            };
            let name = request.metadata.name.clone().unwrap_or_default();
            let editor = request
                .spec
                .edit
                .as_ref()
                .map(|e| e.edited_by.clone())
                .unwrap_or_default();
            match up
                .shared
                .approvals
                .consume_edited(*request, &gated_call.key, &edited.binding)
                .await
            {
                Ok(Resolution::Approved { name }) => {
                    tracing::info!(server = %up.label, tool = %call.name, request = %name, edited_by = %editor,
                        args_hash = %gated_call.key.binding, edited_args_hash = %edited.binding, "edited call approved");
                    note = Some(outcome::edited_note(
                        &call.name,
                        &name,
                        &editor,
                        &edited.paths,
                    ));
                    binding = edited.binding;
                    body = edited.body;
                    (name, Outcome::approved)
                }
                Ok(other) => {
                    let (text, kind) =
                        outcome::refusal_text(&call.name, up.shared.approvals.namespace(), &other)
                            .unwrap_or_else(|| {
                                (
                                    outcome::error(
                                        &call.name,
                                        &format!("ApprovalRequest {name} was not consumed"),
                                    ),
                                    Outcome::error,
                                )
                            });
                    metrics.call(kind);
                    return GatedResult::Refused(text);
                }
                Err(e) => {
                    tracing::warn!(server = %up.label, tool = %call.name, request = %name, error = %e, "consuming the edited approval failed; not forwarded");
                    metrics.call(Outcome::error);
                    return GatedResult::Refused(outcome::error(
                        &call.name,
                        &format!("{} ({})", e, e.reason()),
                    ));
                }
            }
        }
        Err(refused) => return GatedResult::Refused(refused),
    };
    if let (Some(note), Some(notes)) = (&note, notes) {
        notes.expect(call.id.clone(), note.clone());
    }
    match up.send(Method::POST, uri, headers, body).await {
        Ok(resp) => {
            tracing::info!(server = %up.label, tool = %call.name, request = %name, outcome = ?kind, "approved call forwarded");
            metrics.call(kind);
            GatedResult::Forwarded(resp, name, binding, note)
        }
        Err(e) => {
            tracing::warn!(server = %up.label, tool = %call.name, request = %name, error = %e, "upstream failed after approval");
            metrics.call(Outcome::error);
            let why = e.tell(&up.label);
            GatedResult::Refused(if e.may_have_reached() {
                outcome::upstream_lost(&call.name, Some(&name), &why)
            } else {
                outcome::upstream_failed_after_approval(&call.name, &name, &why)
            })
        }
    }
}

/// How a gated call was approved.
enum Approved {
    /// As it was made: the request this gate consumed and how it was approved.
    Plainly(String, Outcome),
    /// With an approver's edit, not yet consumed ([`Resolution::Edited`]).
    WithEdit(Box<ApprovalRequest>),
}

/// Finishes the request of an edit the gate refused (`refusal`), and the text telling the
/// client: the approver's edit was refused and the call did not run.
async fn refuse_edit(
    up: &Upstream,
    gated_call: &GatedCall,
    request: ApprovalRequest,
    call: &ToolCall,
    refusal: &EditRefusal,
) -> String {
    let name = request.metadata.name.clone().unwrap_or_default();
    let editor = request
        .spec
        .edit
        .as_ref()
        .map(|e| e.edited_by.clone())
        .unwrap_or_default();
    let why = refusal.to_string();
    tracing::info!(server = %up.label, tool = %call.name, request = %name, edited_by = %editor, %why,
        "refused: the approver's edit; not forwarded");
    up.shared.metrics.call(Outcome::refused);
    if let Err(e) = up
        .shared
        .approvals
        .refuse_edit(request, &gated_call.key, &why)
        .await
    {
        tracing::warn!(request = %name, error = %e, "could not record the refused edit");
    }
    outcome::edit_refused(&call.name, &name, &editor, &why)
}

/// Resolves the approval of `gated_call` (a grant, with the call's `facts`, or a person): how
/// it was approved, or the text refusing the call.
async fn approve(
    up: &Upstream,
    gated_call: &GatedCall,
    facts: Option<&Activation>,
    tool: &str,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<Approved, String> {
    let metrics = &up.shared.metrics;
    let approvals = &up.shared.approvals;
    let started = Instant::now();
    let resolution = approvals.resolve(gated_call, facts, progress).await;
    metrics.approval_wait(started.elapsed());
    match resolution {
        Ok(Resolution::Approved { name }) => Ok(Approved::Plainly(name, Outcome::approved)),
        Ok(Resolution::Granted { name }) => Ok(Approved::Plainly(name, Outcome::granted)),
        Ok(Resolution::Edited { request }) => Ok(Approved::WithEdit(request)),
        Ok(other) => {
            let (text, kind) = outcome::refusal_text(tool, approvals.namespace(), &other)
                .expect("only Approved has no refusal text");
            tracing::info!(server = %up.label, tool, outcome = ?kind, args_hash = %gated_call.key.binding, "gated call not forwarded");
            metrics.call(kind);
            Err(text)
        }
        Err(Error::OpenRequestCap { open, cap }) => {
            tracing::warn!(server = %up.label, tool, open, cap, args_hash = %gated_call.key.binding,
                "refused: the agent is at its cap of open ApprovalRequests");
            metrics.open_request_cap_reached();
            metrics.call(Outcome::refused);
            Err(outcome::open_request_cap(
                tool,
                approvals.namespace(),
                open,
                cap,
                gated_call.key.caller.as_deref(),
            ))
        }
        Err(e) => {
            tracing::warn!(server = %up.label, tool, reason = e.reason(), error = %e, "approval failed; not forwarded");
            metrics.call(Outcome::error);
            Err(outcome::error(tool, &format!("{} ({})", e, e.reason())))
        }
    }
}
