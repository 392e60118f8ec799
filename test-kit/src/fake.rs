//! An in-process fake kube-apiserver.
//!
//! For `approvalrequests`: list (label selector), create (AlreadyExists), get, watch (field
//! selector metadata.name or label selector, from a resourceVersion), and merge-patch of
//! `/status` with resourceVersion preconditions and write-once consumedAt. It records every
//! request body and can be told to fail every request. For `kubectl hitl ui`, it also watches
//! the whole collection, answers SelfSubjectReviews (as user `alice`) and can refuse decisions
//! on chosen requests as RBAC would. For the gate's grants, it lists `approvalgrants` and
//! merge-patches their `/status` with resourceVersion preconditions.
//!
//! Every other path is a generic in-memory store of any kind, its collections named by path
//! (`/apis/apps/v1/namespaces/demo/deployments`): list and watch (label selector, field
//! selector metadata.name, watches replaying every change after their resourceVersion), get,
//! create and merge-patch over HTTP (a subresource such as `/status` patches its object), and
//! [`FakeApi::put`] and [`FakeApi::delete`] for the test's own changes. One exception serves
//! the gate's watch of its own Agent: a list naming one Agent that is not stored answers it,
//! never frozen (the freeze is tested with the gate's view fed directly, and on the real
//! apiserver). [`FakeApi::seen`] has every request to any path, and [`FakeApi::stall`] keeps
//! chosen ones in flight for ever.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Value>,
    rv: u64,
    requests: Vec<(String, String, String)>,
    fail: Option<u16>,
    watches: BTreeMap<String, usize>,
    forbidden: std::collections::BTreeSet<String>,
    /// Agents whose calls alice may not edit (SelfSubjectAccessReviews of `edit` say no).
    edits_forbidden: std::collections::BTreeSet<String>,
    grants: BTreeMap<String, Value>,
    /// The generic store: collection path → name → object.
    collections: BTreeMap<String, BTreeMap<String, Value>>,
    /// Every change of the generic store, in order: (collection, event type, object).
    history: Vec<(String, &'static str, Value)>,
    seen: Vec<Seen>,
    stalled: Vec<String>,
    /// Tokens the TokenReviews know: token → (user, audiences it is valid for).
    tokens: BTreeMap<String, (Value, Vec<String>)>,
    /// TokenReviews answered (or failed).
    token_reviews: usize,
    /// Fail every TokenReview with this code.
    fail_reviews: Option<u16>,
}

/// The apiserver's own audience: a token made without one (a legacy Secret token, a
/// `kubectl create token` without `--audience`) is valid for it.
pub const APISERVER_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// A request as the fake received it, whatever its path.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its path and query.
    pub uri: String,
    /// Whether it asked for metadata only (`Accept: ...;as=PartialObjectMetadataList`).
    pub metadata_only: bool,
}

/// The fake apiserver's shared state.
#[derive(Clone)]
pub struct FakeApi {
    store: Arc<Mutex<Store>>,
    events: broadcast::Sender<(String, Value)>,
    /// Bumped on every change of the generic store, waking its watches.
    changed: Arc<watch::Sender<()>>,
    /// Base URL, `http://127.0.0.1:port`.
    pub url: String,
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = crate::status(code, reason, message);
    (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response()
}

/// Records, as the apiserver does in managedFields, that `manager` wrote the `spec` fields of
/// `written` (an Update entry per manager; fields move to their latest writer).
fn own(obj: &mut Value, manager: &str, written: &Value) {
    let fields: Vec<String> = written
        .as_object()
        .map(|m| m.keys().map(|k| format!("f:{k}")).collect())
        .unwrap_or_default();
    let entries = obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut entries: Vec<Value> = entries
        .into_iter()
        .map(|mut e| {
            if let Some(spec) = e["fieldsV1"]["f:spec"].as_object_mut() {
                spec.retain(|k, _| !fields.contains(k));
            }
            e
        })
        .collect();
    let spec: serde_json::Map<String, Value> = fields.into_iter().map(|f| (f, json!({}))).collect();
    match entries.iter_mut().find(|e| e["manager"] == manager) {
        Some(e) => e["fieldsV1"]["f:spec"]
            .as_object_mut()
            .unwrap()
            .extend(spec),
        None => entries.push(json!({"manager": manager, "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": spec}})),
    }
    for entry in entries.iter_mut().filter(|e| e["manager"] == manager) {
        entry["time"] = json!(server_now());
    }
    obj["metadata"]["managedFields"] = Value::Array(entries);
}

/// The apiserver's clock, as it writes times: whole seconds.
fn server_now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .expect("now is a valid time")
        .to_string()
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl FakeApi {
    /// Starts the fake on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (events, _) = broadcast::channel(256);
        let api = Self {
            store: Arc::default(),
            events,
            changed: Arc::new(watch::Sender::new(())),
            url,
        };
        let base = "/apis/kagent.dev/v1alpha2/namespaces/{ns}/approvalrequests";
        let app = Router::new()
            .route(base, get(collection).post(create))
            .route(&format!("{base}/{{name}}"), get(one).patch(patch_main))
            .route(
                &format!("{base}/{{name}}/status"),
                axum::routing::patch(patch_status),
            )
            .route(
                "/apis/kagent.dev/v1alpha2/namespaces/{ns}/approvalgrants",
                get(grants),
            )
            .route(
                "/apis/kagent.dev/v1alpha2/namespaces/{ns}/approvalgrants/{name}/status",
                axum::routing::patch(patch_grant_status),
            )
            .route(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                axum::routing::post(self_subject_review),
            )
            .route(
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                axum::routing::post(self_subject_access_review),
            )
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                axum::routing::post(token_review),
            )
            .fallback(generic)
            .layer(middleware::from_fn_with_state(api.clone(), observe))
            .with_state(api.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        api
    }

    /// A kube client talking to this fake.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Every request to ApprovalRequests and ApprovalGrants as (method, uri, body).
    pub fn requests(&self) -> Vec<(String, String, String)> {
        self.store.lock().unwrap().requests.clone()
    }

    /// Stored objects.
    pub fn objects(&self) -> Vec<Value> {
        self.store
            .lock()
            .unwrap()
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// The name of the first ApprovalRequest, once one has been created.
    pub async fn first_request_name(&self) -> String {
        crate::eventually("an ApprovalRequest", || {
            self.objects()
                .first()
                .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
        })
        .await
    }

    /// Makes every request to ApprovalRequests and ApprovalGrants fail with `code` (None: work
    /// again).
    pub fn fail_with(&self, code: Option<u16>) {
        self.store.lock().unwrap().fail = code;
    }

    /// How many watches were opened on `name`.
    pub fn watches(&self, name: &str) -> usize {
        self.store
            .lock()
            .unwrap()
            .watches
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// Stores the ApprovalGrant `grant` (as created now, by whoever its `grantedBy` names).
    pub fn add_grant(&self, mut grant: Value) {
        let mut s = self.store.lock().unwrap();
        s.rv += 1;
        grant["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        grant["metadata"]["creationTimestamp"] = json!(server_now());
        let name = grant["metadata"]["name"].as_str().unwrap().to_string();
        s.grants.insert(name, grant);
    }

    /// The stored ApprovalGrant `name`.
    pub fn grant(&self, name: &str) -> Value {
        self.store.lock().unwrap().grants[name].clone()
    }

    /// Makes every write of a decision on request `name` fail as RBAC refuses it.
    pub fn forbid_decisions(&self, name: &str) {
        self.store.lock().unwrap().forbidden.insert(name.into());
    }

    /// Makes SelfSubjectAccessReviews of the verb `edit` on agent `name` say no (every other
    /// review says yes).
    pub fn forbid_edits(&self, agent: &str) {
        self.store
            .lock()
            .unwrap()
            .edits_forbidden
            .insert(agent.into());
    }

    /// Writes a decision, as `kubectl hitl approve|deny` would (write-once).
    pub fn decide(&self, name: &str, kind: &str, by: &str, reason: &str) {
        self.write_decision(
            name,
            json!({"decision": {"type": kind, "decidedBy": by, "reason": reason}}),
        );
    }

    /// Approves request `name` with an edit, as `kubectl hitl approve --patch PATCH` by `by`
    /// writes it on a request needing one approval: `spec.edit`, `by`'s entry in
    /// `spec.editApprovals` and the decision, in one write.
    pub fn edit_and_approve(&self, name: &str, patch: &str, by: &str) {
        self.write_decision(
            name,
            json!({
                "edit": {"patch": patch, "editedBy": by},
                "editApprovals": [{"approvedBy": by}],
                "decision": {"type": "Approve", "decidedBy": by},
            }),
        );
    }

    /// Merges `written` (with a decision) into request `name`'s spec as kubectl-hitl's write,
    /// and tells the watches.
    fn write_decision(&self, name: &str, written: Value) {
        let mut s = self.store.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        let obj = s.objects.get_mut(name).expect("request exists");
        assert!(
            obj["spec"].get("decision").is_none(),
            "decision is write-once"
        );
        merge(obj, &json!({ "spec": written }));
        own(obj, "kubectl-hitl", &written);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let _ = self.events.send(("MODIFIED".into(), obj.clone()));
    }

    /// Replaces request `name` by one created with decision `kind` by `by` already in it, as
    /// an identity that may create requests could do without the admission policies (and
    /// without the CRD rule against it): its creator then owns `spec.decision`.
    pub fn recreate_with_decision(&self, name: &str, kind: &str, by: &str) {
        let mut s = self.store.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        let mut obj = s.objects.remove(name).expect("request exists");
        let _ = self.events.send(("DELETED".into(), obj.clone()));
        obj["spec"]["decision"] = json!({"type": kind, "decidedBy": by});
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["managedFields"] = json!([]);
        obj.as_object_mut().unwrap().remove("status");
        let spec = obj["spec"].clone();
        own(&mut obj, "kubectl-create", &spec);
        s.objects.insert(name.into(), obj.clone());
        let _ = self.events.send(("ADDED".into(), obj));
    }

    /// Makes `token` the bearer token of `username` (in `groups`, with the uid
    /// `uid-<username>`), valid for `audiences`.
    pub fn add_token(&self, token: &str, username: &str, groups: &[&str], audiences: &[&str]) {
        let user =
            json!({"username": username, "uid": format!("uid-{username}"), "groups": groups});
        self.store.lock().unwrap().tokens.insert(
            token.into(),
            (user, audiences.iter().map(|a| a.to_string()).collect()),
        );
    }

    /// How many TokenReviews were asked for.
    pub fn token_reviews(&self) -> usize {
        self.store.lock().unwrap().token_reviews
    }

    /// Makes every TokenReview fail with `code` (None: answer again).
    pub fn fail_token_reviews(&self, code: Option<u16>) {
        self.store.lock().unwrap().fail_reviews = code;
    }

    /// Every request to any path, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.store.lock().unwrap().seen.clone()
    }

    /// Makes every request whose path starts with `prefix` stay in flight for ever (it is still
    /// [`seen`](Self::seen)).
    pub fn stall(&self, prefix: &str) {
        self.store.lock().unwrap().stalled.push(prefix.into());
    }

    /// Answers the requests whose path starts with `prefix` again from now on (those already
    /// stalled stay in flight).
    pub fn unstall(&self, prefix: &str) {
        self.store.lock().unwrap().stalled.retain(|p| p != prefix);
    }

    /// Stores `object` in the generic collection at path `collection`, created or replaced as
    /// another writer would: a new resourceVersion, and an ADDED or MODIFIED event.
    pub fn put(&self, collection: &str, object: Value) {
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let mut s = self.store.lock().unwrap();
        let kind = if s
            .collections
            .get(collection)
            .is_some_and(|c| c.contains_key(&name))
        {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.change(&mut s, collection, kind, object);
    }

    /// Deletes object `name` from the generic collection at path `collection`, with a DELETED
    /// event.
    pub fn delete(&self, collection: &str, name: &str) {
        let mut s = self.store.lock().unwrap();
        let object = s
            .collections
            .get(collection)
            .and_then(|c| c.get(name))
            .cloned();
        self.change(
            &mut s,
            collection,
            "DELETED",
            object.expect("the object exists"),
        );
    }

    /// The object `name` of the generic collection at path `collection`, if stored.
    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        let s = self.store.lock().unwrap();
        s.collections.get(collection)?.get(name).cloned()
    }

    /// Applies one change to the generic store: a new resourceVersion for `object`, stored
    /// (or removed when `kind` is DELETED), kept in the history and shown to the watches.
    fn change(
        &self,
        s: &mut Store,
        collection: &str,
        kind: &'static str,
        mut object: Value,
    ) -> Value {
        s.rv += 1;
        object["metadata"]["resourceVersion"] = json!(s.rv.to_string());
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let objects = s.collections.entry(collection.into()).or_default();
        if kind == "DELETED" {
            objects.remove(&name);
        } else {
            objects.insert(name, object.clone());
        }
        s.history.push((collection.into(), kind, object.clone()));
        self.changed.send_replace(());
        object
    }

    fn record(&self, method: &Method, uri: &Uri, body: &[u8]) -> Option<Response> {
        let mut s = self.store.lock().unwrap();
        s.requests.push((
            method.to_string(),
            uri.to_string(),
            String::from_utf8_lossy(body).into(),
        ));
        s.fail.map(|code| {
            status(
                code,
                if code == 403 {
                    "Forbidden"
                } else {
                    "InternalError"
                },
                "injected failure",
            )
        })
    }
}

async fn collection(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if let Some(r) = api.record(&method, &uri, b"") {
        return r;
    }
    if q.get("watch").map(String::as_str) == Some("true") {
        return watch(api, q);
    }
    let selector = label_selector(&q);
    let s = api.store.lock().unwrap();
    let items: Vec<Value> = s
        .objects
        .values()
        .filter(|o| selected(o, &selector))
        .cloned()
        .collect();
    axum::Json(
        json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalRequestList",
        "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
    .into_response()
}

/// The `key=value` pairs of a request's `labelSelector`.
fn label_selector(q: &BTreeMap<String, String>) -> Vec<(String, String)> {
    q.get("labelSelector")
        .map(|s| {
            s.split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `obj` has every label of `selector`.
fn selected(obj: &Value, selector: &[(String, String)]) -> bool {
    selector
        .iter()
        .all(|(k, v)| obj["metadata"]["labels"][k] == json!(v))
}

/// The caller is `alice`.
async fn self_subject_review() -> Response {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
        "metadata": {}, "status": {"userInfo": {"username": "alice", "groups": ["approvers"]}}});
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

/// A SelfSubjectAccessReview: allowed, unless it asks for `edit` on an agent of
/// [`FakeApi::forbid_edits`].
async fn self_subject_access_review(State(api): State<FakeApi>, body: Bytes) -> Response {
    let mut review: Value = serde_json::from_slice(&body).unwrap();
    let asked = &review["spec"]["resourceAttributes"];
    let forbidden = asked["verb"] == "edit"
        && asked["name"]
            .as_str()
            .is_some_and(|n| api.store.lock().unwrap().edits_forbidden.contains(n));
    review["status"] = json!({"allowed": !forbidden});
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

/// A TokenReview, as kube-apiserver answers it: authenticated when the token is known and
/// valid for one of the audiences asked about (the apiserver's when none), with those
/// audiences in `status.audiences`.
async fn token_review(State(api): State<FakeApi>, body: Bytes) -> Response {
    let review: Value = serde_json::from_slice(&body).unwrap();
    let mut s = api.store.lock().unwrap();
    s.token_reviews += 1;
    if let Some(code) = s.fail_reviews {
        return status(code, "InternalError", "token reviews fail");
    }
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let asked: Vec<String> = match review["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|a| a.as_str().map(String::from))
            .collect(),
        _ => vec![APISERVER_AUDIENCE.into()],
    };
    let reviewed = match s.tokens.get(token) {
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
        Some((user, valid)) => {
            let both: Vec<&String> = asked.iter().filter(|a| valid.contains(a)).collect();
            if both.is_empty() {
                json!({"authenticated": false, "error": format!(
                    "[invalid bearer token, token audiences {valid:?} is invalid for the target audiences {asked:?}]")})
            } else {
                json!({"authenticated": true, "user": user, "audiences": both})
            }
        }
    };
    let answer = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {"creationTimestamp": null}, "spec": review["spec"], "status": reviewed});
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

/// A watch of one request (field selector `metadata.name=`) or, without one, of every request
/// its label selector selects.
fn watch(api: FakeApi, q: BTreeMap<String, String>) -> Response {
    let selector = label_selector(&q);
    let name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .unwrap_or_default()
        .to_string();
    let every = name.is_empty();
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut rx = api.events.subscribe();
    let current = {
        let mut s = api.store.lock().unwrap();
        *s.watches.entry(name.clone()).or_default() += 1;
        s.objects.get(&name).cloned()
    };
    let line = |kind: &str, obj: &Value| {
        Ok::<_, std::io::Error>(Bytes::from(crate::watch_lines(&[(kind, obj.clone())])))
    };
    let (tx, mut out) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut last = from;
        if let Some(obj) = current.filter(|o| rv_of(o) > from) {
            last = rv_of(&obj);
            if tx.send(line("MODIFIED", &obj)).is_err() {
                return;
            }
        }
        while let Ok((kind, obj)) = rx.recv().await {
            let watched = if every {
                selected(&obj, &selector)
            } else {
                obj["metadata"]["name"] == json!(name)
            };
            if watched && (kind == "DELETED" || rv_of(&obj) > last) {
                last = last.max(rv_of(&obj));
                if tx.send(line(&kind, &obj)).is_err() {
                    return;
                }
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| out.poll_recv(cx));
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn create(State(api): State<FakeApi>, method: Method, uri: Uri, body: Bytes) -> Response {
    if let Some(r) = api.record(&method, &uri, &body) {
        return r;
    }
    let mut obj: Value = serde_json::from_slice(&body).unwrap();
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let mut s = api.store.lock().unwrap();
    if s.objects.contains_key(&name) {
        return status(
            409,
            "AlreadyExists",
            &format!("approvalrequests \"{name}\" already exists"),
        );
    }
    s.rv += 1;
    obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
    obj["metadata"]["uid"] = json!(format!("uid-{}", s.rv));
    obj["metadata"]["creationTimestamp"] = json!(server_now());
    obj["metadata"]["managedFields"] = json!([]);
    let spec = obj["spec"].clone();
    own(&mut obj, "hitl-gate", &spec);
    s.objects.insert(name, obj.clone());
    let _ = api.events.send(("ADDED".into(), obj.clone()));
    (StatusCode::CREATED, axum::Json(obj)).into_response()
}

async fn one(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    if let Some(r) = api.record(&method, &uri, b"") {
        return r;
    }
    match api.store.lock().unwrap().objects.get(&name) {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => status(404, "NotFound", "not found"),
    }
}

async fn patch_main(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(r) = api.record(&method, &uri, &body) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut s = api.store.lock().unwrap();
    if s.forbidden.contains(&name) {
        let message = format!(
            "approvalrequests.kagent.dev \"{name}\" is forbidden: User \"alice\" cannot approve \
             resource \"agents\" in API group \"kagent.dev\""
        );
        return status(403, "Forbidden", &message);
    }
    s.rv += 1;
    let rv = s.rv;
    let Some(obj) = s.objects.get_mut(&name) else {
        return status(404, "NotFound", "not found");
    };
    merge(obj, &json!({"spec": patch["spec"]}));
    own(obj, "kubectl-patch", &patch["spec"]);
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    let obj = obj.clone();
    let _ = api.events.send(("MODIFIED".into(), obj.clone()));
    axum::Json(obj).into_response()
}

async fn patch_status(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(r) = api.record(&method, &uri, &body) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut s = api.store.lock().unwrap();
    let next_rv = s.rv + 1;
    let Some(obj) = s.objects.get_mut(&name) else {
        return status(404, "NotFound", "not found");
    };
    if stale(obj, &patch) {
        return conflict();
    }
    if obj["status"].get("consumedAt").is_some() && patch["status"].get("consumedAt").is_some() {
        return status(422, "Invalid", "status.consumedAt is write-once");
    }
    let obj = merge_status(obj, &patch, next_rv);
    s.rv = next_rv;
    let _ = api.events.send(("MODIFIED".into(), obj.clone()));
    axum::Json(obj).into_response()
}

async fn grants(State(api): State<FakeApi>, method: Method, uri: Uri) -> Response {
    if let Some(r) = api.record(&method, &uri, b"") {
        return r;
    }
    let s = api.store.lock().unwrap();
    let items: Vec<Value> = s.grants.values().cloned().collect();
    axum::Json(
        json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrantList",
        "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
    )
    .into_response()
}

async fn patch_grant_status(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(r) = api.record(&method, &uri, &body) {
        return r;
    }
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut s = api.store.lock().unwrap();
    let next_rv = s.rv + 1;
    let Some(grant) = s.grants.get_mut(&name) else {
        return status(404, "NotFound", "not found");
    };
    if stale(grant, &patch) {
        return conflict();
    }
    let grant = merge_status(grant, &patch, next_rv);
    s.rv = next_rv;
    axum::Json(grant).into_response()
}

/// Whether `patch` is guarded by a resourceVersion other than `obj`'s (a [`conflict`]).
fn stale(obj: &Value, patch: &Value) -> bool {
    patch["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|want| obj["metadata"]["resourceVersion"] != json!(want))
}

/// A merge patch of `obj`'s status as the apiserver applies one to the status subresource: the
/// status merged, the object at resourceVersion `next_rv`; returns a copy of it.
fn merge_status(obj: &mut Value, patch: &Value, next_rv: u64) -> Value {
    if obj.get("status").is_none() {
        obj["status"] = json!({});
    }
    merge(&mut obj["status"], &patch["status"]);
    obj["metadata"]["resourceVersion"] = json!(next_rv.to_string());
    obj.clone()
}

/// The apiserver's 409 for a write guarded by a resourceVersion that is no longer current.
fn conflict() -> Response {
    status(
        409,
        "Conflict",
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// Records every request in [`FakeApi::seen`], and holds the stalled ones.
async fn observe(State(api): State<FakeApi>, request: Request, next: Next) -> Response {
    let metadata_only = request
        .headers()
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
    let path = request.uri().path().to_string();
    let stalled = {
        let mut s = api.store.lock().unwrap();
        s.seen.push(Seen {
            uri: request.uri().to_string(),
            metadata_only,
        });
        s.stalled
            .iter()
            .any(|prefix| path.starts_with(prefix.as_str()))
    };
    if stalled {
        return futures::future::pending().await;
    }
    next.run(request).await
}

/// The collection path of a resource path and the object's name in it, if it names one
/// (`/api/v1/namespaces/ns/secrets/s/status` is object `s` of `/api/v1/namespaces/ns/secrets`).
fn address(path: &str) -> Option<(String, Option<String>)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let group = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    let namespaced = segments.get(group) == Some(&"namespaces") && segments.len() > group + 2;
    let collection = group + if namespaced { 3 } else { 1 };
    if segments.len() < collection {
        return None;
    }
    let name = segments.get(collection).map(|n| n.to_string());
    Some((format!("/{}", segments[..collection].join("/")), name))
}

/// What a list or watch selects: its label selector's `key=value` pairs and field selector's
/// `metadata.name`.
struct Selector {
    labels: Vec<(String, String)>,
    name: Option<String>,
}

impl Selector {
    fn of(q: &BTreeMap<String, String>) -> Self {
        let name = q
            .get("fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .map(String::from);
        Self {
            labels: label_selector(q),
            name,
        }
    }

    fn selects(&self, obj: &Value) -> bool {
        selected(obj, &self.labels)
            && self
                .name
                .as_ref()
                .is_none_or(|name| obj["metadata"]["name"] == json!(name))
    }
}

/// The generic store's requests: list, watch, get, create and merge-patch.
async fn generic(
    State(api): State<FakeApi>,
    method: Method,
    uri: Uri,
    Query(q): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some((collection, name)) = address(uri.path()) else {
        return status(404, "NotFound", "no such path");
    };
    match (method, name) {
        (Method::GET, None) if q.get("watch").map(String::as_str) == Some("true") => {
            watch_collection(api, collection, &q)
        }
        (Method::GET, None) => list(&api, &collection, &q),
        (Method::GET, Some(name)) => match api.get(&collection, &name) {
            Some(obj) => axum::Json(obj).into_response(),
            None => status(404, "NotFound", &format!("{name} not found")),
        },
        (Method::POST, None) => {
            let obj: Value = serde_json::from_slice(&body).unwrap();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let mut s = api.store.lock().unwrap();
            if s.collections
                .get(&collection)
                .is_some_and(|c| c.contains_key(&name))
            {
                return status(409, "AlreadyExists", &format!("{name} already exists"));
            }
            let obj = api.change(&mut s, &collection, "ADDED", obj);
            (StatusCode::CREATED, axum::Json(obj)).into_response()
        }
        (Method::PATCH, Some(name)) => {
            let patch: Value = serde_json::from_slice(&body).unwrap();
            let mut s = api.store.lock().unwrap();
            let Some(mut obj) = s
                .collections
                .get(&collection)
                .and_then(|c| c.get(&name))
                .cloned()
            else {
                return status(404, "NotFound", &format!("{name} not found"));
            };
            merge(&mut obj, &patch);
            axum::Json(api.change(&mut s, &collection, "MODIFIED", obj)).into_response()
        }
        _ => status(405, "MethodNotAllowed", "not served by the fake"),
    }
}

/// A list of the generic collection `collection`. The gate's view of its own Agent: a list
/// naming one Agent that is not stored answers it, unfrozen.
fn list(api: &FakeApi, collection: &str, q: &BTreeMap<String, String>) -> Response {
    let selector = Selector::of(q);
    let s = api.store.lock().unwrap();
    let mut items: Vec<Value> = s
        .collections
        .get(collection)
        .into_iter()
        .flat_map(BTreeMap::values)
        .filter(|o| selector.selects(o))
        .cloned()
        .collect();
    let agents = collection
        .strip_prefix("/apis/kagent.dev/v1alpha2/namespaces/")
        .and_then(|rest| rest.strip_suffix("/agents"));
    if let (Some(ns), Some(name), true) = (agents, &selector.name, items.is_empty()) {
        items.push(json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"type": "Declarative"}}));
    }
    axum::Json(json!({"apiVersion": "v1", "kind": "List",
        "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}))
    .into_response()
}

/// A watch of the generic collection `collection`: every change after its resourceVersion
/// that its selectors select, then each new one, for ever.
fn watch_collection(api: FakeApi, collection: String, q: &BTreeMap<String, String>) -> Response {
    let watch = Watch {
        changed: api.changed.subscribe(),
        api,
        collection,
        selector: Selector::of(q),
        from: q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        next: 0,
    };
    let stream = futures::stream::unfold(watch, |mut watch| async move {
        loop {
            watch.changed.borrow_and_update();
            let events = watch.new_events();
            if !events.is_empty() {
                let lines = Bytes::from(crate::watch_lines(&events));
                return Some((Ok::<_, std::io::Error>(lines), watch));
            }
            watch.changed.changed().await.ok()?;
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// One watch of the generic store: what it selects, and how far in the history it has read.
struct Watch {
    api: FakeApi,
    collection: String,
    selector: Selector,
    from: u64,
    next: usize,
    changed: watch::Receiver<()>,
}

impl Watch {
    /// The events of the history not read yet that this watch shows, as (type, object).
    fn new_events(&mut self) -> Vec<(&'static str, Value)> {
        let s = self.api.store.lock().unwrap();
        let new = &s.history[self.next..];
        self.next = s.history.len();
        new.iter()
            .filter(|(c, _, o)| {
                *c == self.collection && rv_of(o) > self.from && self.selector.selects(o)
            })
            .map(|(_, kind, o)| (*kind, o.clone()))
            .collect()
    }
}

/// An object's resourceVersion, as a number.
fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
    use std::time::Duration;

    const CONFIG_MAPS: &str = "/api/v1/namespaces/demo/configmaps";

    fn config_map(name: &str, value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "demo", "labels": {"app": "a"}},
            "data": {"k": value}})
    }

    #[tokio::test]
    async fn the_generic_store_lists_creates_patches_and_replays_changes_to_watches() {
        let api = FakeApi::start().await;
        api.put(CONFIG_MAPS, config_map("one", "1"));
        let maps: Api<ConfigMap> = Api::namespaced(api.client(), "demo");
        let listed = maps
            .list(&ListParams::default().labels("app=a"))
            .await
            .unwrap();
        assert_eq!(listed.items.len(), 1);
        assert!(
            maps.list(&ListParams::default().labels("app=b"))
                .await
                .unwrap()
                .items
                .is_empty()
        );
        let from = listed.metadata.resource_version.unwrap();

        let two: ConfigMap = serde_json::from_value(config_map("two", "2")).unwrap();
        maps.create(&PostParams::default(), &two).await.unwrap();
        let again = maps.create(&PostParams::default(), &two).await.unwrap_err();
        assert!(matches!(again, kube::Error::Api(s) if s.code == 409));
        let patch = Patch::Merge(json!({"data": {"k": "changed"}}));
        maps.patch("one", &PatchParams::default(), &patch)
            .await
            .unwrap();
        api.delete(CONFIG_MAPS, "two");
        assert_eq!(maps.get("one").await.unwrap().data.unwrap()["k"], "changed");
        assert!(maps.get_opt("two").await.unwrap().is_none());

        let events: Vec<(&str, String)> = maps
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .take(3)
            .map_ok(|event| match event {
                WatchEvent::Added(o) => ("ADDED", o.metadata.name.unwrap()),
                WatchEvent::Modified(o) => ("MODIFIED", o.metadata.name.unwrap()),
                WatchEvent::Deleted(o) => ("DELETED", o.metadata.name.unwrap()),
                other => panic!("{other:?}"),
            })
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            events,
            [
                ("ADDED", "two".into()),
                ("MODIFIED", "one".into()),
                ("DELETED", "two".into())
            ]
        );
    }

    #[tokio::test]
    async fn every_request_is_seen_and_stalled_ones_stay_in_flight() {
        let api = FakeApi::start().await;
        let maps: Api<ConfigMap> = Api::namespaced(api.client(), "demo");
        maps.list_metadata(&ListParams::default()).await.unwrap();
        api.stall(&format!("{CONFIG_MAPS}/held"));
        let held = tokio::time::timeout(Duration::from_millis(200), maps.get("held")).await;
        assert!(held.is_err(), "a stalled request is never answered");
        api.unstall(&format!("{CONFIG_MAPS}/held"));
        let answered = tokio::time::timeout(Duration::from_secs(5), maps.get("held")).await;
        assert!(answered.is_ok(), "answered again once unstalled");

        let seen = api.seen();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[0].metadata_only && seen[0].uri.starts_with(&format!("{CONFIG_MAPS}?")));
        assert!(!seen[1].metadata_only && seen[1].uri == format!("{CONFIG_MAPS}/held"));
    }
}
