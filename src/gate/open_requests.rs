//! The cap on an agent's open ApprovalRequests (DESIGN.md §5, "Storage is bounded"): before the
//! gate creates a request it counts the agent's open ones, and at the cap it creates none and
//! refuses the call. Reusing a live request of the same call is never refused: the gate looks
//! for one first ([`super::approval`]).
//!
//! Open: a request that can still be decided or still let its call through. Its phase is unset,
//! Pending or Approved, it is not consumed, not denied, and its `expiresAt` lies ahead. Finished
//! requests (Denied, Expired, Executed, Cancelled) do not count: the controller deletes them
//! `ttlAfterFinished` after they finish, and the chart's ResourceQuota bounds how many a
//! namespace holds. Only requests naming this agent (`spec.agentRef`) and this gate's identity
//! (`spec.requestedBy`) count, so nobody else's requests use up the agent's cap.
//!
//! The count is the apiserver's, not one process's: each gate keeps one watch of the agent's
//! requests (label `kagent.dev/agent`), started by the first call that would create one, held
//! as a map from request name to the moment it stops being open. Counting costs no request, and
//! a gate whose calls never ask for approval never watches. Every replica and restart sees the
//! requests of the others. Within one gate the count is exact: a creation holds a slot from
//! before its request is sent until it is recorded. Replicas of one agent creating at the same
//! moment may each miss the other's creation, so the agent can pass its cap by at most the
//! creations its other replicas have in flight then.
//!
//! On a shared gate (a ToolGate) the cap is each caller's: only the requests of the call's
//! caller (`spec.caller.username`) count against it, so one caller cannot use up the others'
//! room. On an Agent's gate no request has a caller, and they all count.
//!
//! Fail closed: until the watch has listed the requests, and from any error of the watch until
//! it has listed them again, the count is unknown, and no request is created.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use tokio::sync::watch;

use super::approval::label_value;
use crate::api::approval_request::{ApprovalRequest, DecisionType, LABEL_AGENT, Phase};
use crate::contract::gate_config::AgentIdentity;
use crate::{Error, Result};

/// How long a call that would create a request waits for the count to become known (the
/// watch starting or recovering) before it is refused.
pub const COUNT_BOUND: Duration = Duration::from_secs(5);

/// Requests per page of the watch's lists: with full previews, a page is about 2 MB, which
/// the gate's memory limit holds many times over.
const PAGE_SIZE: u32 = 50;

/// Whether one more request may be created while `open` requests are open and this gate is
/// creating `in_flight` more, under a cap of `cap`.
pub fn admit(open: usize, in_flight: usize, cap: u32) -> bool {
    open.saturating_add(in_flight) < usize::try_from(cap).unwrap_or(usize::MAX)
}

/// Until when `req` counts as an open request of agent `agent` asked by `requester`; `None`
/// if it does not count: it is someone else's, finished, consumed or denied. (Its `expiresAt`
/// is when it stops counting even if nobody marks it Expired.)
pub fn open_until(req: &ApprovalRequest, agent: &str, requester: &str) -> Option<Timestamp> {
    let status = req.status.as_ref();
    let ours = req.spec.agent_ref.name == agent && req.spec.requested_by == requester;
    let finished = status
        .and_then(|s| s.phase)
        .is_some_and(|phase| !matches!(phase, Phase::Pending | Phase::Approved));
    let consumed = status.is_some_and(|s| s.consumed_at.is_some());
    let denied = req
        .spec
        .decision
        .as_ref()
        .is_some_and(|d| d.decision_type == DecisionType::Deny);
    (ours && !finished && !consumed && !denied).then_some(req.spec.expires_at.0)
}

/// The caller whose cap `req` counts against: `spec.caller.username`, none on an Agent's
/// gate.
fn caller_of(req: &ApprovalRequest) -> Option<String> {
    req.spec.caller.as_ref().map(|c| c.username.clone())
}

/// An open request as counted: its caller, and when it stops being open.
type Open = (Option<String>, Timestamp);

/// What one gate knows of its agent's open requests.
#[derive(Debug)]
struct Tally {
    /// Each open request by name; `Err(why)` while not known.
    open: std::result::Result<HashMap<String, Open>, String>,
    /// Creations this gate has started and not yet recorded, by caller.
    in_flight: HashMap<Option<String>, usize>,
}

/// The count of an agent's open requests, shared by the calls of one gate.
#[derive(Clone)]
pub struct OpenRequests {
    tally: Arc<watch::Sender<Tally>>,
    /// The most open requests the agent may hold.
    cap: u32,
    /// The watch to start at the first [`Self::reserve`]; `None` once started, or for a count
    /// that no watch feeds.
    unstarted: Arc<Mutex<Option<Watch>>>,
}

impl std::fmt::Debug for OpenRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenRequests")
            .field("tally", &*self.tally.borrow())
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

/// What the watch of the agent's requests needs.
struct Watch {
    api: Api<ApprovalRequest>,
    agent: String,
    requester: String,
}

impl OpenRequests {
    /// The count of `agent`'s open requests, under `cap`, from a watch through `client` that
    /// the first [`Self::reserve`] starts.
    pub fn watching(client: kube::Client, agent: &AgentIdentity, cap: u32) -> Self {
        let watch = Watch {
            api: Api::namespaced(client, &agent.namespace),
            agent: agent.name.clone(),
            requester: agent.requester(),
        };
        let why = format!(
            "the ApprovalRequests of Agent {}/{} have not been listed yet",
            agent.namespace, agent.name
        );
        Self {
            tally: Arc::new(
                watch::channel(Tally {
                    open: Err(why),
                    in_flight: HashMap::new(),
                })
                .0,
            ),
            cap,
            unstarted: Arc::new(Mutex::new(Some(watch))),
        }
    }

    /// A slot for one new request of the agent (on a shared gate: of `caller`) at `now`, once
    /// the count is known (waiting at most [`COUNT_BOUND`] for that); an error when the agent
    /// (the caller) is at its cap ([`Error::OpenRequestCap`]) or the count is not known
    /// ([`Error::OpenRequestsUnknown`]).
    pub async fn reserve(&self, now: Timestamp, caller: Option<&str>) -> Result<Slot> {
        if let Some(watch) = self.unstarted.lock().expect("watch lock").take() {
            tokio::spawn(run(watch, self.tally.clone()));
        }
        let mut known = self.tally.subscribe();
        // Past the bound, the state below says why it is still unknown.
        let _ = tokio::time::timeout(COUNT_BOUND, known.wait_for(|t| t.open.is_ok())).await;
        let caller = caller.map(String::from);
        let mut taken = Ok(());
        self.tally
            .send_modify(|tally| taken = tally.take_slot(now, self.cap, &caller));
        taken.map(|()| Slot {
            tally: self.tally.clone(),
            caller,
        })
    }
}

impl Tally {
    /// Counts one more creation of `caller` in flight at `now` if it is under `cap`: forgets
    /// the requests expired by then, and says why not if it may not.
    fn take_slot(&mut self, now: Timestamp, cap: u32, caller: &Option<String>) -> Result<()> {
        let open = match &mut self.open {
            Err(why) => return Err(Error::OpenRequestsUnknown { why: why.clone() }),
            Ok(open) => open,
        };
        open.retain(|_, (_, until)| *until > now);
        let held = open.values().filter(|(c, _)| c == caller).count();
        let in_flight = self.in_flight.entry(caller.clone()).or_default();
        if !admit(held, *in_flight, cap) {
            return Err(Error::OpenRequestCap {
                open: held + *in_flight,
                cap,
            });
        }
        *in_flight += 1;
        Ok(())
    }
}

/// Room for one request this gate is creating, counted until it is recorded
/// ([`Slot::created`]) or dropped (the creation did not happen).
#[derive(Debug)]
pub struct Slot {
    tally: Arc<watch::Sender<Tally>>,
    caller: Option<String>,
}

impl Slot {
    /// Records `req`, just created by this gate for this slot: it counts from now on, before
    /// the watch shows it.
    pub fn created(self, req: &ApprovalRequest) {
        if let Some(name) = req.metadata.name.clone() {
            self.tally.send_modify(|tally| {
                if let Ok(open) = &mut tally.open {
                    open.entry(name)
                        .or_insert((caller_of(req), req.spec.expires_at.0));
                }
            });
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.tally.send_modify(|tally| {
            if let Some(n) = tally.in_flight.get_mut(&self.caller) {
                *n -= 1;
                if *n == 0 {
                    tally.in_flight.remove(&self.caller);
                }
            }
        });
    }
}

/// Keeps `tally` current from a watch of the agent's requests, for as long as the runtime
/// runs: each (re)list replaces the count, each change updates it, and any error makes it
/// unknown until the next list, which follows after a pause (0.8 s, doubling up to 30 s while
/// the errors last). A list of its own after each error, rather than resuming the watch, is
/// what tells the gate when the count is known again.
async fn run(watch: Watch, tally: Arc<watch::Sender<Tally>>) {
    let Watch {
        api,
        agent,
        requester,
    } = watch;
    let subject = format!("the ApprovalRequests of Agent {agent}");
    let config = watcher::Config::default()
        .labels(&format!("{LABEL_AGENT}={}", label_value(&agent)))
        .page_size(PAGE_SIZE);
    let mut pauses = DefaultBackoff::default();
    loop {
        let mut listed = HashMap::new();
        let mut events = std::pin::pin!(watcher::watcher(api.clone(), config.clone()));
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => listed.clear(),
                Ok(Event::InitApply(req)) => {
                    if let Some(until) = open_until(&req, &agent, &requester) {
                        let caller = caller_of(&req);
                        listed.insert(req.metadata.name.unwrap_or_default(), (caller, until));
                    }
                }
                Ok(Event::InitDone) => {
                    pauses.reset();
                    let listed = std::mem::take(&mut listed);
                    tracing::info!(
                        open = listed.len(),
                        "counted the agent's open ApprovalRequests"
                    );
                    tally.send_modify(|tally| tally.open = Ok(listed));
                }
                Ok(Event::Apply(req)) => {
                    let until = open_until(&req, &agent, &requester);
                    let caller = caller_of(&req);
                    let name = req.metadata.name.unwrap_or_default();
                    tally.send_modify(|tally| {
                        if let Ok(open) = &mut tally.open {
                            match until {
                                Some(until) => open.insert(name, (caller, until)),
                                None => open.remove(&name),
                            };
                        }
                    });
                }
                Ok(Event::Delete(req)) => {
                    let name = req.metadata.name.unwrap_or_default();
                    tally.send_modify(|tally| {
                        if let Ok(open) = &mut tally.open {
                            open.remove(&name);
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot watch the agent's ApprovalRequests: creating none until they are listed again");
                    let why = format!("cannot watch {subject}: {error}");
                    tally.send_modify(|tally| tally.open = Err(why));
                    break;
                }
            }
        }
        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(30))).await;
    }
}

#[cfg(test)]
impl OpenRequests {
    /// A count under `cap` that starts from `requests` (as `agent`'s gate counts them) and
    /// that no watch feeds: only this gate's own creations change it.
    pub fn fixed(agent: &AgentIdentity, cap: u32, requests: &[ApprovalRequest]) -> Self {
        let requester = agent.requester();
        let open = requests
            .iter()
            .filter_map(|r| {
                let until = open_until(r, &agent.name, &requester)?;
                Some((
                    r.metadata.name.clone().unwrap_or_default(),
                    (caller_of(r), until),
                ))
            })
            .collect();
        Self {
            tally: Arc::new(
                watch::channel(Tally {
                    open: Ok(open),
                    in_flight: HashMap::new(),
                })
                .0,
            ),
            cap,
            unstarted: Arc::default(),
        }
    }

    /// A count that stays unknown (why).
    pub fn unknown(cap: u32, why: &str) -> Self {
        Self {
            tally: Arc::new(
                watch::channel(Tally {
                    open: Err(why.into()),
                    in_flight: HashMap::new(),
                })
                .0,
            ),
            cap,
            unstarted: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use hitl_test_kit::mock;
    use serde_json::{Value, json};

    use super::*;

    const GATE: &str = "system:serviceaccount:team:agent-a-sa";

    fn agent() -> AgentIdentity {
        AgentIdentity {
            kind: Default::default(),
            namespace: "team".into(),
            name: "agent-a".into(),
            uid: String::new(),
            service_account: "agent-a-sa".into(),
        }
    }

    fn at(time: &str) -> Timestamp {
        time.parse().unwrap()
    }

    /// A request of `agent`, asked by `requester`, expiring at 01:00, with `more` merged in.
    fn request_as(name: &str, agent: &str, requester: &str, more: Value) -> Value {
        let mut req = json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequest",
            "metadata": {"name": name, "namespace": "team", "resourceVersion": "1",
                "labels": {"kagent.dev/agent": agent}},
            "spec": {"agentRef": {"name": agent},
                "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "tools"},
                "toolName": "delete_file", "argumentsSha256": "0".repeat(64), "argumentsBytes": 2,
                "requestedBy": requester, "expiresAt": "2026-11-22T01:00:00Z"},
        });
        if let (Some(req), Some(more)) = (req.as_object_mut(), more.as_object()) {
            for (key, value) in more {
                match (req.get_mut(key), value) {
                    (Some(Value::Object(have)), Value::Object(add)) => {
                        have.extend(add.clone());
                    }
                    _ => {
                        req.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        req
    }

    fn request(name: &str, more: Value) -> ApprovalRequest {
        serde_json::from_value(request_as(name, "agent-a", GATE, more)).unwrap()
    }

    #[test]
    fn one_more_request_is_admitted_only_below_the_cap() {
        assert!(admit(0, 0, 1));
        assert!(admit(49, 0, 50));
        assert!(!admit(50, 0, 50));
        assert!(!admit(49, 1, 50), "creations in flight count");
        assert!(!admit(51, 0, 50));
        assert!(!admit(0, 0, 0));
    }

    #[test]
    fn only_this_callers_undecided_or_unused_requests_count_until_they_expire() {
        let until = Some(at("2026-11-22T01:00:00Z"));
        let approve = json!({"decision": {"type": "Approve", "decidedBy": "alice"}});
        let deny = json!({"decision": {"type": "Deny", "decidedBy": "alice"}});
        let counted = [
            ("created, no status yet", json!({})),
            ("pending", json!({"status": {"phase": "Pending"}})),
            (
                "approved, not used",
                json!({"spec": approve.clone(), "status": {"phase": "Approved"}}),
            ),
            ("approved, phase not yet written", json!({"spec": approve})),
        ];
        for (what, more) in counted {
            assert_eq!(
                open_until(&request("r", more), "agent-a", GATE),
                until,
                "{what}"
            );
        }
        let not_counted = [
            ("denied, phase not yet written", json!({"spec": deny})),
            ("executed", json!({"status": {"phase": "Executed"}})),
            (
                "consumed",
                json!({"status": {"phase": "Approved", "consumedAt": "2026-11-22T00:10:00Z"}}),
            ),
            ("expired", json!({"status": {"phase": "Expired"}})),
            ("denied", json!({"status": {"phase": "Denied"}})),
            ("cancelled", json!({"status": {"phase": "Cancelled"}})),
        ];
        for (what, more) in not_counted {
            assert_eq!(
                open_until(&request("r", more), "agent-a", GATE),
                None,
                "{what}"
            );
        }
        let other_agent: ApprovalRequest =
            serde_json::from_value(request_as("r", "agent-b", GATE, json!({}))).unwrap();
        assert_eq!(open_until(&other_agent, "agent-a", GATE), None);
        let someone_else: ApprovalRequest = serde_json::from_value(request_as(
            "r",
            "agent-a",
            "system:serviceaccount:team:other",
            json!({}),
        ))
        .unwrap();
        assert_eq!(open_until(&someone_else, "agent-a", GATE), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_counts_from_its_reservation_until_recorded_or_dropped() {
        let before = at("2026-11-22T00:00:00Z");
        let open = OpenRequests::fixed(
            &agent(),
            2,
            &[
                request("r1", json!({})),
                request("done", json!({"status": {"phase": "Executed"}})),
            ],
        );
        let slot = open.reserve(before, None).await.unwrap();
        // One open, one being created: the cap of 2 is reached.
        let full = open.reserve(before, None).await.unwrap_err();
        assert!(
            matches!(full, Error::OpenRequestCap { open: 2, cap: 2 }),
            "{full:?}"
        );
        drop(slot);
        let slot = open.reserve(before, None).await.unwrap();
        slot.created(&request("r2", json!({})));
        let full = open.reserve(before, None).await.unwrap_err();
        assert!(
            matches!(full, Error::OpenRequestCap { open: 2, cap: 2 }),
            "{full:?}"
        );
        // At expiresAt both stop counting, marked Expired or not.
        let after = at("2026-11-22T01:00:00Z");
        let _a = open.reserve(after, None).await.unwrap();
        let _b = open.reserve(after, None).await.unwrap();
    }

    /// On a shared gate each caller has a cap of its own.
    #[tokio::test(start_paused = true)]
    async fn on_a_shared_gate_each_caller_counts_its_own_requests() {
        let now = at("2026-11-22T00:00:00Z");
        let of = |name: &str, caller: &str| {
            request(name, json!({"spec": {"caller": {"username": caller}}}))
        };
        let open = OpenRequests::fixed(&agent(), 1, &[of("a1", "bot-a")]);
        let full = open.reserve(now, Some("bot-a")).await.unwrap_err();
        assert!(
            matches!(full, Error::OpenRequestCap { open: 1, cap: 1 }),
            "{full:?}"
        );
        let slot = open.reserve(now, Some("bot-b")).await.unwrap();
        // bot-b's creation in flight counts against bot-b only.
        assert!(open.reserve(now, Some("bot-b")).await.is_err());
        slot.created(&of("b1", "bot-b"));
        assert!(open.reserve(now, Some("bot-b")).await.is_err());
        assert!(open.reserve(now, Some("bot-c")).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_count_is_waited_for_then_refused() {
        let open = OpenRequests::unknown(50, "not listed yet");
        let started = tokio::time::Instant::now();
        let refused = open
            .reserve(at("2026-11-22T00:00:00Z"), None)
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), COUNT_BOUND);
        assert_eq!(refused.reason(), "OpenRequestsUnknown");
        assert!(refused.to_string().contains("not listed yet"), "{refused}");
    }

    fn list_of(items: Vec<Value>) -> Value {
        json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequestList",
            "metadata": {"resourceVersion": "5"}, "items": items})
    }

    /// The first reservation starts one label-selected, paged watch; its list makes the count
    /// known. A failed watch makes it unknown (no request is created) until a new list.
    #[tokio::test(start_paused = true)]
    async fn the_watch_counts_from_its_list_and_after_an_error_only_once_listed_again() {
        let (client, mut handle) = mock::pair("team");
        let open = OpenRequests::watching(client, &agent(), 2);
        let now = at("2026-11-22T00:00:00Z");
        let first = tokio::spawn({
            let open = open.clone();
            async move { open.reserve(now, None).await.map(drop) }
        });
        let (_, uri, _, send) = handle.next().await.parts();
        assert_eq!(
            uri,
            "/apis/kagent.dev/v1alpha2/namespaces/team/approvalrequests?&labelSelector=kagent.dev%2Fagent%3Dagent-a&limit=50"
        );
        let listed = vec![
            request_as("r1", "agent-a", GATE, json!({})),
            request_as(
                "r2",
                "agent-a",
                GATE,
                json!({"status": {"phase": "Denied"}}),
            ),
        ];
        send.respond(200, &list_of(listed));
        first
            .await
            .unwrap()
            .expect("one open of 2: room for one more");
        let (_, uri, _, send) = handle.next().await.parts();
        assert!(
            uri.contains("watch=true") && uri.contains("resourceVersion=5"),
            "{uri}"
        );
        // The watch is refused: the count is unknown until the next list.
        send.respond(
            500,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "etcd is down", "reason": "InternalError", "code": 500}),
        );
        let refused = tokio::spawn({
            let open = open.clone();
            async move { open.reserve(now, None).await.map(drop) }
        });
        let (_, uri, _, send) = handle.next().await.parts();
        assert!(uri.contains("limit=50") && !uri.contains("watch"), "{uri}");
        let refused = refused.await.unwrap().unwrap_err();
        assert_eq!(refused.reason(), "OpenRequestsUnknown");
        assert!(refused.to_string().contains("etcd is down"), "{refused}");
        // Listed again, with a second open request: the agent is at its cap.
        let listed = vec![
            request_as("r1", "agent-a", GATE, json!({})),
            request_as("r3", "agent-a", GATE, json!({})),
        ];
        send.respond(200, &list_of(listed));
        let full = tokio::spawn({
            let open = open.clone();
            async move { open.reserve(now, None).await.map(drop) }
        });
        let (_, uri, _, _watching) = handle.next().await.parts();
        assert!(uri.contains("watch=true"), "{uri}");
        let full = full.await.unwrap().unwrap_err();
        assert!(
            matches!(full, Error::OpenRequestCap { open: 2, cap: 2 }),
            "{full:?}"
        );
    }
}
