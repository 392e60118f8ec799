//! Agent reconciler against the mock API server.

use hitl_operator::api::agent::AgentStatus;
use hitl_operator::api::{Agent, ApprovalRequest, ModelConfig, RemoteMCPServer};
use hitl_operator::controller::agent::reconcile;
use hitl_operator::render::objects::{GateOwner, binding_key_secret};
use hitl_operator::render::refs::RefStore;
use hitl_operator::render::{RenderOptions, render_agent};
use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use serde_json::{Value, json};

use crate::harness::*;

const MC: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/modelconfigs/default-model-config";
const RMCP: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/remotemcpservers/fs";

fn agent() -> Agent {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: a, namespace: ns, uid: agent-uid, generation: 3}
spec:
  type: Declarative
  declarative:
    systemMessage: You manage files.
    tools:
      - type: McpServer
        mcpServer:
          name: fs
          toolNames: [read_file, delete_file]
          requireApproval: [delete_file]
"#,
    )
}

fn model_config() -> ModelConfig {
    yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config, namespace: ns}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: openai, apiKeySecretKey: key}
status: {secretHash: "00ff"}
"#,
    )
}

fn server(discovered: &[&str]) -> RemoteMCPServer {
    let mut server: RemoteMCPServer = yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: fs, namespace: ns}
spec: {url: "http://fs.ns:8080/mcp"}
"#,
    );
    if !discovered.is_empty() {
        server.status = Some(yaml(&format!(
            r#"
conditions:
  - {{type: Accepted, status: "True", reason: Reconciled, message: "", lastTransitionTime: "2027-01-15T08:00:00Z"}}
discoveredTools: [{}]
"#,
            discovered
                .iter()
                .map(|t| format!("{{name: {t}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    server
}

fn rendered(agent: &Agent, server: &RemoteMCPServer) -> hitl_operator::render::AgentObjects {
    let mut refs = RefStore::default();
    refs.insert_model_config(model_config());
    refs.insert_remote_mcp_server(server.clone());
    render_agent(agent, &refs, &RenderOptions::default())
        .expect("fixture renders")
        .objects
}

/// Where the controller creates the binding-key Secret.
const KEY_CREATE: &str = "/api/v1/namespaces/ns/secrets?&fieldManager=hitl-operator";

/// A binding-key Secret as the controller creates it: immutable, owned by the Agent, with 32
/// random bytes that no other Secret shares.
fn assert_fresh_binding_key(body: &Value) {
    assert_eq!(body["metadata"]["name"], "a-binding-key");
    assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "agent-uid");
    assert_eq!(body["immutable"], true);
    let key = body["data"]["key"].as_str().expect("a key");
    let bytes = base64_len(key);
    assert_eq!(bytes, 32, "{key}");
    assert_ne!(
        key,
        serde_json::to_value(binding_key_secret(&GateOwner::agent(&agent()), &[7; 32])).unwrap()["data"]
            ["key"]
    );
}

/// Length of the bytes a standard base64 text encodes.
fn base64_len(text: &str) -> usize {
    text.trim_end_matches('=').len() * 3 / 4
}

/// `cache` with the ModelConfig and `server` the Agent names, as the watches cache them.
fn with_refs(cache: Cache, server: &RemoteMCPServer) -> Cache {
    Cache {
        model_configs: vec![model_config()],
        remote_mcp_servers: vec![server.clone()],
        ..cache
    }
}

fn ready_deployment(objects: &hitl_operator::render::AgentObjects) -> Deployment {
    let mut deployment = objects.deployment.clone();
    deployment.metadata.generation = Some(1);
    deployment.metadata.resource_version = Some("7".into());
    deployment.status = Some(yaml(
        "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 1, readyReplicas: 1}",
    ));
    deployment
}

/// A cache holding exactly what the renderer produces (as the apiserver would return it).
fn applied_cache(objects: &hitl_operator::render::AgentObjects, agent: &Agent) -> Cache {
    Cache {
        agents: vec![agent.clone()],
        secrets: vec![
            objects.secret.clone(),
            binding_key_secret(&GateOwner::agent(agent), &[7; 32]),
        ],
        service_accounts: objects.service_account.iter().cloned().collect(),
        roles: objects.role.iter().cloned().collect(),
        role_bindings: objects.role_binding.iter().cloned().collect(),
        deployments: vec![ready_deployment(objects)],
        services: vec![objects.service.clone()],
        ..Cache::default()
    }
}

#[tokio::test]
async fn first_reconcile_applies_every_object_then_status() {
    let agent = agent();
    let server = server(&[]);
    let objects = rendered(&agent, &server);
    let pending: ApprovalRequest = yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: ApprovalRequest
metadata: {name: r1, namespace: ns}
spec:
  agentRef: {name: a}
  toolServer: {kind: RemoteMCPServer, name: fs, namespace: ns}
  toolName: delete_file
  argumentsSha256: "0000000000000000000000000000000000000000000000000000000000000000"
  argumentsBytes: 2
  requestedBy: system:serviceaccount:ns:a
  expiresAt: "2027-01-15T09:00:00Z"
"#,
    );
    let mut script = Vec::from(created("/api/v1/namespaces/ns/secrets/a"));
    script.push(expect(Method::POST, KEY_CREATE, json!({})));
    for path in [
        "/api/v1/namespaces/ns/serviceaccounts/a",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/a-approval-gate",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/a-approval-gate",
        "/apis/apps/v1/namespaces/ns/deployments/a",
        "/api/v1/namespaces/ns/services/a",
    ] {
        script.extend(created(path));
    }
    script.extend([
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let cache = Cache {
        agents: vec![agent.clone()],
        approvals: vec![pending],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");

    // Each object is applied exactly as rendered; the binding key is created before the
    // Deployment that mounts it.
    let written = writes(&requests);
    assert_eq!(written[0], &json_of(&objects.secret));
    assert_fresh_binding_key(written[1]);
    assert_eq!(
        written[2],
        &json_of(objects.service_account.as_ref().unwrap())
    );
    assert_eq!(written[3], &json_of(objects.role.as_ref().unwrap()));
    assert_eq!(written[4], &json_of(objects.role_binding.as_ref().unwrap()));
    assert_eq!(written[5], &json_of(&objects.deployment));
    assert_eq!(written[6], &json_of(&objects.service));

    let status = written[7];
    assert_eq!(status["apiVersion"], "kagent.dev/v1alpha2");
    assert_eq!(status["kind"], "Agent");
    assert_eq!(status["metadata"], json!({"name": "a"}));
    assert_eq!(
        conditions(status),
        vec![
            (
                "ToolsAvailable".into(),
                "True".into(),
                "ToolsOffered".into()
            ),
            (
                "GateIsolated".into(),
                "False".into(),
                "SidecarSharesNetwork".into()
            ),
            ("Accepted".into(), "True".into(), "Reconciled".into()),
            ("Ready".into(), "False".into(), "DeploymentNotReady".into()),
        ]
    );
    assert!(
        condition_message(status, "GateIsolated")
            .contains("can call RemoteMCPServer ns/fs (delete_file) directly"),
        "{status:#}"
    );
    assert_eq!(status["status"]["observedGeneration"], 3);
    assert_eq!(status["status"]["pendingApprovals"], 1);
    // Where the runtime keeps its conversations: the session store, its KAGENT_URL.
    assert_eq!(
        status["status"]["sessionStore"],
        "http://hitl-sessions.hitl-system.svc:8083"
    );
    let hash = status["status"]["configHash"].as_str().unwrap();
    assert_eq!(
        objects
            .deployment
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()["kagent.dev/config-hash"],
        hash
    );
    let event = written[8];
    assert_eq!(event["reason"], "Reconciled");
    assert_eq!(event["regarding"]["name"], "a");
}

#[tokio::test]
async fn reconcile_with_everything_in_place_writes_nothing() {
    let server = server(&["delete_file", "read_file"]);
    let mut agent = agent();
    let objects = rendered(&agent, &server);

    // 1: the objects are cached as applied; only the status is written.
    let mut script = Vec::new();
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let cache = applied_cache(&objects, &agent);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let status = &requests[0].body;
    assert!(conditions(status).contains(&(
        "Ready".into(),
        "True".into(),
        "DeploymentReady".into()
    )));
    assert_eq!(status["status"]["pendingApprovals"], 0);

    // 2: the Agent now carries that status: a reconcile reads and writes nothing, its
    // ModelConfig and RemoteMCPServer come from the caches.
    agent.status = Some(serde_json::from_value(status["status"].clone()).unwrap());
    let cache = applied_cache(&objects, &agent);
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(600)),
        )
    })
    .await;
    result.unwrap();
    assert!(requests.is_empty(), "{requests:?}");

    // 3: watching only another namespace (`--namespace`), the caches know nothing of this
    // one: both references are read from the apiserver, and still nothing is written.
    let cache = Cache {
        scope: Some("elsewhere".into()),
        ..applied_cache(&objects, &agent)
    };
    let script = vec![
        expect(Method::GET, MC, json_of(&model_config())),
        expect(Method::GET, RMCP, json_of(&server)),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(agent.clone()), cache.context(client, at(600)))
    })
    .await;
    result.unwrap();
    assert_eq!(requests.len(), 2, "{requests:?}");
}

#[tokio::test]
async fn a_status_cached_as_its_digest_is_read_only_when_a_write_follows() {
    let server = server(&["delete_file", "read_file"]);
    let agent = agent();
    let objects = rendered(&agent, &server);
    let settled = settled(&agent, &server, applied_cache(&objects, &agent)).await;
    let status = settled.status.clone().unwrap();
    // The cache keeps the digest of the status it is given (`CachedAgent::status_digest`).
    let as_cached = |status: &AgentStatus| {
        let mut cached = settled.clone();
        cached.status = Some(status.clone());
        cached
    };

    // The digest of the status as it stands: nothing is read or written.
    let held = as_cached(&status);
    let cache = applied_cache(&objects, &held);
    let (result, _) = run_script(Vec::new(), |client| {
        reconcile(
            cached(held.clone()),
            with_refs(cache, &server).context(client, at(600)),
        )
    })
    .await;
    result.unwrap();

    // A status that says something else: it is read, then written with its conditions'
    // transition times kept (nothing but the count changed, so no Event).
    let mut stale = status.clone();
    stale.pending_approvals = Some(3);
    let held = as_cached(&stale);
    let mut read = settled.clone();
    read.status = Some(stale);
    let mut script = Vec::new();
    script.push(expect(
        Method::GET,
        "/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a",
        json_of(&read),
    ));
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&settled),
    ));
    let cache = applied_cache(&objects, &held);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(held.clone()),
            with_refs(cache, &server).context(client, at(600)),
        )
    })
    .await;
    result.unwrap();
    let written = &requests.last().unwrap().body["status"];
    assert_eq!(written["pendingApprovals"], 0);
    assert_eq!(written["conditions"], json_of(&status)["conditions"]);
}

#[tokio::test]
async fn drifted_deployment_is_put_back_alone() {
    let server = server(&["delete_file", "read_file"]);
    let agent = agent();
    let objects = rendered(&agent, &server);
    let mut cache = applied_cache(&objects, &agent);
    let mut drifted = cache.deployments[0].clone();
    drifted.spec.as_mut().unwrap().replicas = Some(5);
    cache.deployments = vec![drifted.clone()];
    let mut script = Vec::new();
    // The cached digest of the applied fields differs: the object is read, then put back.
    script.push(expect(
        Method::GET,
        "/apis/apps/v1/namespaces/ns/deployments/a",
        json_of(&drifted),
    ));
    script.push(expect(
        Method::PATCH,
        &format!("/apis/apps/v1/namespaces/ns/deployments/a{APPLY}"),
        json!({}),
    ));
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    assert_eq!(requests[1].body["spec"]["replicas"], 1);
}

/// The Agent as it is after a reconcile that settled its status.
async fn settled(agent: &Agent, server: &RemoteMCPServer, cache: Cache) -> Agent {
    let mut script = Vec::new();
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let mut settled = agent.clone();
    settled.status = Some(serde_json::from_value(requests[0].body["status"].clone()).unwrap());
    settled
}

#[tokio::test]
async fn a_field_the_apiserver_defaulted_costs_one_read_and_no_write() {
    let server = server(&["delete_file", "read_file"]);
    let agent = agent();
    let objects = rendered(&agent, &server);
    let agent = settled(&agent, &server, applied_cache(&objects, &agent)).await;
    // The apiserver stored what we applied with a default filled in inside a field we own
    // (as it does inside a fieldRef without apiVersion, or a quantity it writes in canonical
    // form): the digest of our applied fields differs from the rendered Deployment's, yet
    // nothing is to be written.
    let mut defaulted = ready_deployment(&objects);
    let pod = defaulted
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap();
    pod.containers[0].termination_message_path = Some("/dev/termination-log".into());
    let mut cache = applied_cache(&objects, &agent);
    cache.deployments = vec![defaulted.clone()];
    let script = vec![expect(
        Method::GET,
        "/apis/apps/v1/namespaces/ns/deployments/a",
        json_of(&applied_by_us(defaulted.clone())),
    )];
    // The second reconcile remembers that read: it reads nothing.
    let (result, requests) = run_script(script, |client| async move {
        let ctx = with_refs(cache, &server).context(client, at(0));
        reconcile(cached(agent.clone()), ctx.clone()).await?;
        reconcile(cached(agent), ctx).await
    })
    .await;
    result.unwrap();
    assert_eq!(requests.len(), 1, "one read, no write: {requests:?}");
}

#[tokio::test]
async fn missing_reference_applies_nothing_and_names_it() {
    let agent = agent();
    let script = vec![
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ];
    // The ModelConfig is cached, the RemoteMCPServer is not (and the cache has listed).
    let cache = Cache {
        agents: vec![agent.clone()],
        model_configs: vec![model_config()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(agent.clone()), cache.context(client, at(0)))
    })
    .await;
    result.expect("a missing reference is reported in the status, not as an error");
    let status = &requests[0].body;
    assert!(conditions(status).contains(&(
        "Accepted".into(),
        "False".into(),
        "RefNotFound".into()
    )));
    let message = condition_message(status, "Accepted");
    assert!(message.contains("RemoteMCPServer ns/fs"), "{message}");
    assert!(status["status"].get("configHash").is_none());
    assert!(status["status"].get("sessionStore").is_none());
    assert_eq!(requests[1].body["type"], "Warning");
    assert_eq!(requests[1].body["reason"], "RefNotFound");
}

#[tokio::test]
async fn byo_agent_is_refused() {
    let agent: Agent = yaml(
        r#"
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: a, namespace: ns, uid: agent-uid, generation: 1}
spec: {type: BYO, byo: {deployment: {image: x}}}
"#,
    );
    let script = vec![
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ];
    let cache = Cache::default();
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(agent.clone()), cache.context(client, at(0)))
    })
    .await;
    result.unwrap();
    let status = &requests[0].body;
    assert!(conditions(status).contains(&(
        "Accepted".into(),
        "False".into(),
        "InvalidSpec".into()
    )));
    assert!(condition_message(status, "Accepted").contains("BYO"));
}

#[tokio::test]
async fn tools_the_server_does_not_offer_are_named() {
    let server = server(&["read_file"]);
    let agent = agent();
    let objects = rendered(&agent, &server);
    let mut script = Vec::new();
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let cache = applied_cache(&objects, &agent);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let status = &requests[0].body;
    assert!(conditions(status).contains(&(
        "ToolsAvailable".into(),
        "False".into(),
        "ToolsMissing".into()
    )));
    assert_eq!(
        condition_message(status, "ToolsAvailable"),
        "RemoteMCPServer ns/fs does not offer delete_file"
    );
}

#[tokio::test]
async fn failed_apply_reports_reconcile_failed() {
    let server = server(&[]);
    let agent = agent();
    let mut script = Vec::new();
    script.push(failure(
        Method::PATCH,
        &format!("/api/v1/namespaces/ns/secrets/a{APPLY_NEW}"),
        http::StatusCode::FORBIDDEN,
    ));
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let cache = Cache {
        agents: vec![agent.clone()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    assert_eq!(result.unwrap_err().reason(), "KubeError");
    assert!(conditions(writes(&requests)[1]).contains(&(
        "Accepted".into(),
        "False".into(),
        "ReconcileFailed".into()
    )));
}

#[tokio::test]
async fn api_key_rotation_rolls_the_pods() {
    let server = server(&["delete_file", "read_file"]);
    let agent = agent();
    let objects = rendered(&agent, &server);
    let cache = applied_cache(&objects, &agent);
    // The ModelConfig controller recorded a new key hash since the objects were applied.
    let mut rotated = model_config();
    rotated.status.as_mut().unwrap().secret_hash = Some("11ee".into());
    let cache = Cache {
        model_configs: vec![rotated],
        remote_mcp_servers: vec![server.clone()],
        ..cache
    };
    let script = vec![
        expect(
            Method::GET,
            "/apis/apps/v1/namespaces/ns/deployments/a",
            json_of(&cache.deployments[0]),
        ),
        expect(
            Method::PATCH,
            &format!("/apis/apps/v1/namespaces/ns/deployments/a{APPLY}"),
            json!({}),
        ),
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ];
    let (result, requests) = run_script(script, |client| {
        reconcile(cached(agent.clone()), cache.context(client, at(0)))
    })
    .await;
    result.unwrap();
    let old_hash = objects
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()["kagent.dev/config-hash"]
        .clone();
    let new_hash =
        &requests[1].body["spec"]["template"]["metadata"]["annotations"]["kagent.dev/config-hash"];
    assert_ne!(new_hash.as_str().unwrap(), old_hash);
    assert_eq!(&requests[2].body["status"]["configHash"], new_hash);
}

#[tokio::test]
async fn agent_being_deleted_is_left_to_the_garbage_collector() {
    let mut agent = agent();
    agent.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)));
    let cache = Cache::default();
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(cached(agent.clone()), cache.context(client, at(1)))
    })
    .await;
    result.unwrap();
    assert!(requests.is_empty());
}

/// The fixture Agent with its gate in Gateway placement, and a server addressed in-cluster.
fn gateway_agent() -> (Agent, RemoteMCPServer) {
    let mut agent = agent();
    let declarative = agent.spec.declarative.as_mut().unwrap();
    declarative.approval = Some(yaml("{placement: Gateway}"));
    let mut server = server(&["delete_file", "read_file"]);
    server.spec.url = "http://fs.ns.svc:8080/mcp".into();
    (agent, server)
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/ns";
const NETPOL: &str = "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies";

#[tokio::test]
async fn gateway_placement_applies_the_gate_its_service_account_and_network_policies() {
    let (agent, server) = gateway_agent();
    let objects = rendered(&agent, &server);
    let gateway = objects.gateway.as_ref().expect("Gateway objects rendered");
    let mut script = Vec::new();
    script.extend(created("/api/v1/namespaces/ns/secrets/a"));
    script.push(expect(Method::POST, KEY_CREATE, json!({})));
    for path in [
        "/api/v1/namespaces/ns/serviceaccounts/a".to_owned(),
        "/api/v1/namespaces/ns/serviceaccounts/a-gate".to_owned(),
        format!("{RBAC}/roles/a-approval-gate"),
        format!("{RBAC}/rolebindings/a-approval-gate"),
        format!("{NETPOL}/a-gate"),
        format!("{NETPOL}/a-egress"),
        "/apis/apps/v1/namespaces/ns/deployments/a".to_owned(),
        "/apis/apps/v1/namespaces/ns/deployments/a-gate".to_owned(),
        "/api/v1/namespaces/ns/services/a".to_owned(),
        "/api/v1/namespaces/ns/services/a-gate".to_owned(),
    ] {
        script.extend(created(&path));
    }
    script.extend([
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let cache = Cache {
        agents: vec![agent.clone()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");

    // Each object exactly as rendered, the NetworkPolicies before the pods they confine.
    let written = writes(&requests);
    assert_fresh_binding_key(written[1]);
    let mut bodies = written.clone();
    bodies.remove(1);
    assert_eq!(
        bodies[..11],
        [
            &json_of(&objects.secret),
            &json_of(objects.service_account.as_ref().unwrap()),
            &json_of(&gateway.service_account),
            &json_of(objects.role.as_ref().unwrap()),
            &json_of(objects.role_binding.as_ref().unwrap()),
            &json_of(&gateway.network_policies[0]),
            &json_of(&gateway.network_policies[1]),
            &json_of(&objects.deployment),
            &json_of(&gateway.deployment),
            &json_of(&objects.service),
            &json_of(&gateway.service),
        ]
    );
    // Only the gate's ServiceAccount may touch ApprovalRequests; only the gate pods hold a token.
    assert_eq!(
        bodies[4]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "a-gate", "namespace": "ns"}])
    );
    assert!(bodies[7]["spec"]["template"]["spec"]["initContainers"].is_null());
    // The gate pods mount the binding key.
    assert!(
        bodies[8]["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "a-binding-key")
    );

    let status = bodies[11];
    assert!(conditions(status).contains(&(
        "GateIsolated".into(),
        "True".into(),
        "GatewayIsolated".into()
    )));
    assert!(conditions(status).contains(&(
        "Ready".into(),
        "False".into(),
        "DeploymentNotReady".into()
    )));
    // Just applied, not in the cache yet: they exist, their rollouts not observed yet.
    assert_eq!(
        condition_message(status, "Ready"),
        "Deployment a rollout not observed yet; Deployment a-gate rollout not observed yet"
    );
}

/// A cache holding what Gateway placement renders, the gate's objects included.
fn gateway_cache(objects: &hitl_operator::render::AgentObjects, agent: &Agent) -> Cache {
    let gateway = objects.gateway.clone().expect("Gateway objects rendered");
    let mut cache = applied_cache(objects, agent);
    cache.service_accounts.push(gateway.service_account);
    cache.network_policies = gateway.network_policies.to_vec();
    cache.deployments.push(gateway.deployment);
    cache.services.push(gateway.service);
    cache
}

#[tokio::test]
async fn gateway_ready_needs_both_deployments_and_names_the_one_that_is_not() {
    let (agent, server) = gateway_agent();
    let objects = rendered(&agent, &server);
    let mut cache = gateway_cache(&objects, &agent);
    let gate = cache.deployments.last_mut().unwrap();
    gate.metadata.generation = Some(1);
    gate.status = Some(yaml(
        "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, availableReplicas: 0}",
    ));
    let mut script = Vec::new();
    script.extend([
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    let status = &requests[0].body;
    assert!(conditions(status).contains(&(
        "Ready".into(),
        "False".into(),
        "DeploymentNotReady".into()
    )));
    assert_eq!(
        condition_message(status, "Ready"),
        "Deployment a-gate: 0/1 replicas available, 1 updated"
    );
}

#[tokio::test]
async fn switching_back_to_sidecar_prunes_the_gate_objects_by_name() {
    let (gateway_agent, server) = gateway_agent();
    let before = rendered(&gateway_agent, &server);
    let cache = gateway_cache(&before, &gateway_agent);

    let agent = agent();
    let after = rendered(&agent, &server);
    let deleted =
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}});
    let mut script = Vec::new();
    // Each changed object is read (its applied fields' digest differs), then applied.
    script.extend([
        expect(
            Method::GET,
            "/api/v1/namespaces/ns/secrets/a",
            json_of(&before.secret),
        ),
        expect(
            Method::PATCH,
            &format!("/api/v1/namespaces/ns/secrets/a{APPLY}"),
            json!({}),
        ),
        expect(
            Method::DELETE,
            "/api/v1/namespaces/ns/serviceaccounts/a-gate?",
            deleted.clone(),
        ),
        expect(
            Method::GET,
            &format!("{RBAC}/rolebindings/a-approval-gate"),
            json_of(before.role_binding.as_ref().unwrap()),
        ),
        expect(
            Method::PATCH,
            &format!("{RBAC}/rolebindings/a-approval-gate{APPLY}"),
            json!({}),
        ),
        expect(
            Method::DELETE,
            &format!("{NETPOL}/a-egress?"),
            deleted.clone(),
        ),
        expect(
            Method::DELETE,
            &format!("{NETPOL}/a-gate?"),
            deleted.clone(),
        ),
        expect(
            Method::GET,
            "/apis/apps/v1/namespaces/ns/deployments/a",
            json_of(&before.deployment),
        ),
        expect(
            Method::PATCH,
            &format!("/apis/apps/v1/namespaces/ns/deployments/a{APPLY}"),
            json!({}),
        ),
        expect(
            Method::DELETE,
            "/apis/apps/v1/namespaces/ns/deployments/a-gate?",
            deleted.clone(),
        ),
        expect(
            Method::DELETE,
            "/api/v1/namespaces/ns/services/a-gate?",
            deleted,
        ),
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");
    assert_eq!(
        requests[4].body["subjects"],
        json!([{"kind": "ServiceAccount", "name": "a", "namespace": "ns"}])
    );
    assert_eq!(requests[8].body, json_of(&after.deployment));
    assert_eq!(
        requests[8].body["spec"]["template"]["spec"]["initContainers"][0]["name"],
        "approval-gate"
    );
    // The agent's own Deployment, Service and ServiceAccount, owned alike, are kept.
    let status = &requests[11].body;
    assert!(conditions(status).contains(&(
        "GateIsolated".into(),
        "False".into(),
        "SidecarSharesNetwork".into()
    )));
}

#[tokio::test]
async fn an_unusable_binding_key_is_replaced_and_a_concurrent_create_is_fine() {
    let server = server(&["delete_file", "read_file"]);
    let mut agent = agent();
    let objects = rendered(&agent, &server);
    let mut cache = applied_cache(&objects, &agent);
    // Someone put a 4-byte key there (the Secret is immutable, so it is deleted and made anew).
    cache.secrets[1] = binding_key_secret(&GateOwner::agent(&agent), b"weak");
    agent.status = None;
    let key_path = "/api/v1/namespaces/ns/secrets/a-binding-key";
    let mut script = Vec::new();
    script.extend([
        expect(Method::DELETE, &format!("{key_path}?"), json!({})),
        already_exists(KEY_CREATE),
        // Made by another replica meanwhile: labelled and owned as ours, so it is used.
        expect(
            Method::GET,
            key_path,
            json_of(&binding_key_secret(&GateOwner::agent(&agent), &[9; 32])),
        ),
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.expect("an AlreadyExists on create means another writer made the key");
    assert_fresh_binding_key(&requests[1].body);
}

/// What an Agent whose objects someone else holds gets: nothing written to them, and
/// Accepted=False naming the object and its owner.
async fn left_alone(cache: Cache, script_middle: Vec<Exchange>, agent: &Agent) -> Value {
    let server = server(&["delete_file", "read_file"]);
    let mut script = Vec::new();
    script.extend(script_middle);
    script.extend([
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    assert_eq!(result.unwrap_err().reason(), "OwnedByAnotherController");
    let written = writes(&requests);
    let status = written[written.len() - 2].clone();
    assert!(conditions(&status).contains(&(
        "Accepted".into(),
        "False".into(),
        "OwnedByAnotherController".into()
    )));
    status
}

/// The Deployment kagent renders for the same Agent: the same name, its own managed-by label.
fn kagents_deployment(objects: &hitl_operator::render::AgentObjects) -> Deployment {
    let mut kagents = objects.deployment.clone();
    kagents
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("app.kubernetes.io/managed-by".into(), "kagent".into());
    kagents
}

#[tokio::test]
async fn objects_another_controller_made_are_left_alone() {
    let server = server(&["delete_file", "read_file"]);
    let mut agent = agent();
    agent.status = None;
    let objects = rendered(&agent, &server);
    // kagent rendered Deployment a for the same Agent (same name, its own managed-by label).
    let kagents = kagents_deployment(&objects);
    let read = || {
        expect(
            Method::GET,
            "/apis/apps/v1/namespaces/ns/deployments/a",
            json_of(&kagents),
        )
    };
    // The watch of the Deployments lists it: it is read, never applied. No watch knows of it
    // yet (made since they last heard): the apply, without force, conflicts with kagent's
    // fields, and it is read then.
    let conflict = failure(
        Method::PATCH,
        &format!("/apis/apps/v1/namespaces/ns/deployments/a{APPLY_NEW}"),
        http::StatusCode::CONFLICT,
    );
    for (listed, script) in [(true, vec![read()]), (false, vec![conflict, read()])] {
        let mut cache = applied_cache(&objects, &agent);
        cache.deployments.clear();
        if listed {
            cache.others = vec![("Deployment", "ns", "a")];
        }
        let status = left_alone(cache, script, &agent).await;
        assert_eq!(
            condition_message(&status, "Accepted"),
            "Deployment ns/a exists and is not hitl-operator's (app.kubernetes.io/managed-by=kagent); it was left alone: delete it, or hand the Agent to hitl-operator as docs/kagent.md says",
            "listed: {listed}"
        );
    }
}

#[tokio::test]
async fn the_reconcile_after_a_status_write_neither_reads_nor_rewrites_it() {
    let server = server(&["delete_file", "read_file"]);
    let mut agent = agent();
    agent.status = None;
    agent.metadata.resource_version = Some("41".into());
    let objects = rendered(&agent, &server);
    let mut returned = settled(&agent, &server, applied_cache(&objects, &agent)).await;
    returned.metadata.resource_version = Some("42".into());
    let script = vec![
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&returned),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ];
    // The second reconcile follows the first (its objects' watch events) while the cache still
    // holds the Agent at version 41, without a status: it takes the status written at 42.
    let cache = applied_cache(&objects, &agent);
    let (result, requests) = run_script(script, |client| async move {
        let ctx = with_refs(cache, &server).context(client, at(0));
        reconcile(cached(agent.clone()), ctx.clone()).await?;
        reconcile(cached(agent), ctx).await
    })
    .await;
    result.unwrap();
    assert_eq!(
        requests.len(),
        2,
        "one status write, one Event: {requests:?}"
    );
}

#[tokio::test]
async fn a_binding_key_someone_else_made_is_never_used() {
    let server = server(&["delete_file", "read_file"]);
    let mut agent = agent();
    agent.status = None;
    let objects = rendered(&agent, &server);
    let mut cache = applied_cache(&objects, &agent);
    cache.secrets.truncate(1);
    // Planted before the controller made one: a key its maker knows.
    let mut planted = binding_key_secret(&GateOwner::agent(&agent), &[1; 32]);
    planted.metadata.labels = None;
    planted.metadata.owner_references = None;
    let status = left_alone(
        cache,
        vec![
            already_exists(KEY_CREATE),
            expect(
                Method::GET,
                "/api/v1/namespaces/ns/secrets/a-binding-key",
                json_of(&planted),
            ),
        ],
        &agent,
    )
    .await;
    assert!(condition_message(&status, "Accepted").starts_with(
        "Secret ns/a-binding-key exists and is not hitl-operator's (no app.kubernetes.io/managed-by label)"
    ));
}

#[tokio::test]
async fn a_namespace_freeze_is_reported_on_the_agent_and_its_lifting_too() {
    use hitl_operator::api::freeze::FREEZE_ANNOTATION;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PartialObjectMeta;
    use kube::core::ObjectMeta;

    let server = server(&["delete_file", "read_file"]);
    let agent = settled(
        &agent(),
        &server,
        applied_cache(&rendered(&agent(), &server), &agent()),
    )
    .await;
    let objects = rendered(&agent, &server);
    let frozen_namespace = |annotations: Option<(&str, &str)>| PartialObjectMeta::<Namespace> {
        metadata: ObjectMeta {
            name: Some("ns".into()),
            annotations: annotations
                .map(|(k, v)| [(k.to_string(), v.to_string())].into_iter().collect()),
            ..ObjectMeta::default()
        },
        ..PartialObjectMeta::default()
    };

    // Frozen: the status read (the cache holds only its digest), one status write with the
    // Frozen condition, and a Warning Event.
    let mut cache = applied_cache(&objects, &agent);
    cache.namespaces = vec![frozen_namespace(Some((FREEZE_ANNOTATION, "incident 42")))];
    let read = expect(
        Method::GET,
        "/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a",
        json_of(&agent),
    );
    let mut script = vec![read];
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(60)),
        )
    })
    .await;
    result.unwrap();
    let status = &requests[1].body;
    assert!(conditions(status).contains(&(
        "Frozen".into(),
        "True".into(),
        "NamespaceFrozen".into()
    )));
    let frozen_condition = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Frozen")
        .unwrap();
    assert_eq!(
        frozen_condition["message"],
        "Namespace ns is frozen (hitl.kagent.dev/freeze: incident 42)"
    );
    let event = &requests[2].body;
    assert_eq!(
        (&event["type"], &event["reason"]),
        (&json!("Warning"), &json!("Frozen"))
    );
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("pending ApprovalRequests cancelled")
    );

    // Still frozen, status as written: nothing to write.
    let mut frozen = agent.clone();
    frozen.status = Some(serde_json::from_value(status["status"].clone()).unwrap());
    let mut cache = applied_cache(&objects, &frozen);
    cache.namespaces = vec![frozen_namespace(Some((FREEZE_ANNOTATION, "incident 42")))];
    let (result, requests) = run_script(Vec::new(), |client| {
        reconcile(
            cached(frozen.clone()),
            with_refs(cache, &server).context(client, at(120)),
        )
    })
    .await;
    result.unwrap();
    assert_eq!(requests.iter().filter(|r| r.is_write()).count(), 0);

    // Lifted: the status read, the condition goes, and a Normal Event says so.
    let mut cache = applied_cache(&objects, &frozen);
    cache.namespaces = vec![frozen_namespace(None)];
    let read = expect(
        Method::GET,
        "/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a",
        json_of(&frozen),
    );
    let mut script = vec![read];
    script.push(expect(
        Method::PATCH,
        &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
        json_of(&agent),
    ));
    script.push(expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/ns/events?",
        event_created(),
    ));
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(frozen.clone()),
            with_refs(cache, &server).context(client, at(180)),
        )
    })
    .await;
    result.unwrap();
    assert!(
        !conditions(&requests[1].body)
            .iter()
            .any(|c| c.0 == "Frozen")
    );
    assert_eq!(requests[2].body["reason"], "Unfrozen");
}

/// Issue 59: the Agent as `agent()` with a privileged agent container mounting the node's
/// /var/lib/kubelet.
fn node_reader() -> Agent {
    let mut agent = agent();
    agent.spec.declarative.as_mut().unwrap().deployment = Some(Box::new(yaml(
        "{securityContext: {privileged: true}, volumes: [{name: kubelet, hostPath: {path: /var/lib/kubelet}}], volumeMounts: [{name: kubelet, mountPath: /host}]}",
    )));
    agent
}

#[tokio::test]
async fn an_agent_that_reaches_the_node_is_refused_naming_the_field_and_nothing_is_applied() {
    let agent = node_reader();
    let server = server(&[]);
    let script = vec![
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ];
    let cache = Cache {
        agents: vec![agent.clone()],
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.unwrap();
    assert_eq!(
        requests.len(),
        2,
        "only the status and the Event are written"
    );
    let status = &requests[0].body;
    assert!(
        conditions(status).contains(&("Accepted".into(), "False".into(), "InvalidSpec".into())),
        "{status:#}"
    );
    let message = condition_message(status, "Accepted");
    assert!(
        message.starts_with(
            "Agent ns/a: spec.declarative.deployment.securityContext.privileged: Forbidden: a privileged container has every capability and the node's devices: "
        ),
        "{message}"
    );
    assert!(
        message.contains("(also spec.declarative.deployment.volumes[0].hostPath)"),
        "{message}"
    );
}

#[tokio::test]
async fn an_allowed_agent_that_reaches_the_node_is_applied_and_not_isolated() {
    let agent = node_reader();
    let server = server(&[]);
    let allowed = RenderOptions {
        allow_agent_node_access: true,
        ..RenderOptions::default()
    };
    let mut refs = RefStore::default();
    refs.insert_model_config(model_config());
    refs.insert_remote_mcp_server(server.clone());
    let objects = render_agent(&agent, &refs, &allowed).unwrap().objects;
    let mut script = Vec::from(created("/api/v1/namespaces/ns/secrets/a"));
    script.push(expect(Method::POST, KEY_CREATE, json!({})));
    for path in [
        "/api/v1/namespaces/ns/serviceaccounts/a",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/a-approval-gate",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/a-approval-gate",
        "/apis/apps/v1/namespaces/ns/deployments/a",
        "/api/v1/namespaces/ns/services/a",
    ] {
        script.extend(created(path));
    }
    script.extend([
        expect(
            Method::PATCH,
            &format!("/apis/kagent.dev/v1alpha2/namespaces/ns/agents/a/status{APPLY}"),
            json_of(&agent),
        ),
        expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events?",
            event_created(),
        ),
    ]);
    let cache = Cache {
        agents: vec![agent.clone()],
        render: allowed,
        ..Cache::default()
    };
    let (result, requests) = run_script(script, |client| {
        reconcile(
            cached(agent.clone()),
            with_refs(cache, &server).context(client, at(0)),
        )
    })
    .await;
    result.expect("reconcile succeeds");
    let written = writes(&requests);
    assert_eq!(written[5], &json_of(&objects.deployment));
    assert_eq!(
        written[5]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"],
        true
    );
    let status = written[7];
    assert!(
        conditions(status).contains(&(
            "GateIsolated".into(),
            "False".into(),
            "AgentReachesNode".into()
        )),
        "{status:#}"
    );
    let message = condition_message(status, "GateIsolated");
    assert!(
        message.starts_with(
            "the agent's pods can reach the node they run on: spec.declarative.deployment.securityContext.privileged (a privileged container has every capability and the node's devices); spec.declarative.deployment.volumes[0].hostPath (volume \"kubelet\" mounts the node's \"/var/lib/kubelet\"); "
        ),
        "{message}"
    );
    assert!(
        conditions(status).contains(&("Accepted".into(), "True".into(), "Reconciled".into())),
        "{status:#}"
    );
}
