//! Pure rendering of a ToolGate: its server resolved (a RemoteMCPServer, or an inline url),
//! gate.json with the caller policy of a shared gate, and the gate's objects, all owned by the
//! ToolGate: the gate.json Secret, ServiceAccount, Role, RoleBinding, Deployment and Service
//! `<name>-gate` (the binding key Secret is the controller's, made once).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;

use super::objects::{GateOwner, GatePod, TOOL_GATE_LABEL};
use super::refs::{ObjectKey, RefKind, RefStore, url_namespace};
use super::tools::{self, Endpoint, ResolvedServer};
use super::{
    ApprovalFields, RenderOptions, approval_timings, config_hash, gate_server, max_open_requests,
    rules,
};
use crate::api::ApprovalMode;
use crate::api::agent::ToolServerKind;
use crate::api::approval_request::PolicyKind;
use crate::api::common::ValueRef;
use crate::api::tool_gate::ToolGate;
use crate::contract::gate_config::{
    AgentIdentity, CallerPolicy, GATE_METRICS_LISTEN, GATEWAY_LISTEN, GateApproval, GateConfig,
};
use crate::contract::mounts::GATE_CONFIG_ITEM;
use crate::{Error, Result};

/// Everything rendered for one ToolGate.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedToolGate {
    /// gate.json.
    pub gate: GateConfig,
    /// SHA-256 (hex) of the Secret's content; the gate pods carry it as
    /// `kagent.dev/config-hash`.
    pub config_hash: String,
    /// The objects to apply.
    pub objects: ToolGateObjects,
    /// The gate's in-cluster base URL.
    pub url: String,
    /// The MCP URL of the server through the gate, which clients use.
    pub route: String,
    /// The audiences a caller's token must be valid for.
    pub audiences: Vec<String>,
}

/// The objects of a ToolGate, all owned by it and named `<name>-gate`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolGateObjects {
    /// gate.json.
    pub secret: Secret,
    /// The gate pods' identity.
    pub service_account: ServiceAccount,
    /// What the gate may do with ApprovalRequests (and grants).
    pub role: Role,
    /// Binds the Role to the ServiceAccount.
    pub role_binding: RoleBinding,
    /// The gate pods.
    pub deployment: Deployment,
    /// The gate's MCP endpoint.
    pub service: Service,
}

impl ToolGateObjects {
    /// Every object as JSON, in apply order: dependencies first.
    pub fn to_values(&self) -> serde_json::Result<Vec<serde_json::Value>> {
        Ok(vec![
            serde_json::to_value(&self.secret)?,
            serde_json::to_value(&self.service_account)?,
            serde_json::to_value(&self.role)?,
            serde_json::to_value(&self.role_binding)?,
            serde_json::to_value(&self.deployment)?,
            serde_json::to_value(&self.service)?,
        ])
    }
}

/// `ToolGate namespace/name`, as used in messages.
pub fn describe_tool_gate(tool_gate: &ToolGate) -> String {
    format!(
        "ToolGate {}/{}",
        tool_gate.namespace().unwrap_or_default(),
        tool_gate.name_any()
    )
}

/// The audience a caller's token must be valid for when the ToolGate names none:
/// `toolgate.kagent.dev/<namespace>/<name>`.
pub fn default_audience(tool_gate: &ToolGate) -> String {
    format!(
        "toolgate.kagent.dev/{}/{}",
        tool_gate.namespace().unwrap_or_default(),
        tool_gate.name_any()
    )
}

/// Every object the ToolGate references: its RemoteMCPServer, the Secrets and ConfigMaps of
/// the headers (the RemoteMCPServer's once it is in `store`, or the inline ones), and, when
/// `proxied`, the namespace its URL names (it decides whether the proxy is used). Sorted.
pub fn tool_gate_references(
    tool_gate: &ToolGate,
    store: &RefStore,
    proxied: bool,
) -> Vec<ObjectKey> {
    let namespace = tool_gate.namespace().unwrap_or_default();
    let server = &tool_gate.spec.server;
    let mut keys = BTreeSet::new();
    let (url, headers_from): (Option<&str>, &[ValueRef]) = match &server.remote_mcp_server {
        Some(name) => {
            keys.insert(ObjectKey::new(RefKind::RemoteMCPServer, &namespace, name));
            match store.remote_mcp_server(&namespace, name) {
                Some(remote) => (Some(&remote.spec.url), &remote.spec.headers_from),
                None => (None, &[]),
            }
        }
        None => (server.url.as_deref(), &server.headers_from),
    };
    for source in headers_from.iter().filter_map(|h| h.value_from.as_ref()) {
        keys.insert(ObjectKey::new(
            source.source_type.into(),
            &namespace,
            &source.name,
        ));
    }
    if let Some(host) = url.filter(|_| proxied).and_then(url_namespace) {
        keys.insert(ObjectKey::new(RefKind::Namespace, "", &host));
    }
    keys.into_iter().collect()
}

/// The references of `tool_gate` not in `store` yet: fetch them and call again until none is
/// left (a RemoteMCPServer's headers are known once it is in the store).
pub fn missing_tool_gate_refs(
    tool_gate: &ToolGate,
    store: &RefStore,
    proxied: bool,
) -> Vec<ObjectKey> {
    tool_gate_references(tool_gate, store, proxied)
        .into_iter()
        .filter(|key| !store.contains(key))
        .collect()
}

/// Renders a ToolGate: validates what the schema cannot (or what a ToolGate that skipped
/// admission holds), resolves its server in `refs` and builds gate.json and the objects.
pub fn render_tool_gate(
    tool_gate: &ToolGate,
    refs: &RefStore,
    options: &RenderOptions,
) -> Result<RenderedToolGate> {
    let object = describe_tool_gate(tool_gate);
    let namespace = tool_gate.namespace().unwrap_or_default();
    let spec = &tool_gate.spec;
    let invalid = |field: String, message: String| Error::InvalidSpec {
        object: object.clone(),
        field,
        message,
    };
    for (index, tool) in spec.require_approval.iter().enumerate() {
        if !spec.tool_names.contains(tool) {
            return Err(invalid(
                format!("spec.requireApproval[{index}]"),
                format!(
                    "Invalid value: {tool:?}: each requireApproval entry must also appear in toolNames"
                ),
            ));
        }
    }
    let server = resolve_server(&object, tool_gate, refs, options)?;
    let approval = spec.approval.as_ref();
    let fields = ApprovalFields::of_tool_gate(approval);
    let timings = approval_timings(&object, &fields)?;
    let max_open_requests = max_open_requests(&object, &fields, options.max_open_requests)?;
    let approval_rules = approval.map(|a| a.rules.as_slice()).unwrap_or_default();
    rules::check_tool_gate_rules(&object, approval_rules, &server.name, &spec.tool_names)?;
    rules::check_rule_escalations(
        &object,
        "spec.approval.rules",
        approval_rules,
        timings.timeout,
    )?;
    let escalation = approval
        .and_then(|a| a.escalation.as_deref())
        .filter(|e| !e.steps.is_empty() || e.warn_before.is_some());
    if let Some(escalation) = escalation {
        escalation
            .check(timings.timeout)
            .map_err(|(field, message)| {
                invalid(format!("spec.approval.escalation.{field}"), message)
            })?;
    }

    let owner = GateOwner::tool_gate(tool_gate);
    let callers = spec.callers.clone().unwrap_or_default();
    let audiences = if callers.audiences.is_empty() {
        vec![default_audience(tool_gate)]
    } else {
        callers.audiences
    };
    let gate_server = gate_server(&server, approval_rules);
    let url = owner.gate_url();
    let route = format!("{url}{}", gate_server.route);
    let gate = GateConfig {
        agent: AgentIdentity {
            kind: PolicyKind::ToolGate,
            namespace: namespace.clone(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            service_account: owner.gate_name(),
        },
        approval: GateApproval {
            mode: ApprovalMode::Gate,
            timeout_seconds: timings.timeout,
            wait_timeout_seconds: timings.wait_timeout,
            ttl_after_finished_seconds: timings.ttl_after_finished,
            grant_max_ttl_seconds: options.grant_max_ttl.map(|ttl| ttl.as_secs_f64()),
            max_open_requests,
            escalation: escalation.cloned(),
        },
        listen: GATEWAY_LISTEN.to_owned(),
        metrics_listen: GATE_METRICS_LISTEN.to_owned(),
        servers: vec![gate_server],
        callers: Some(CallerPolicy {
            audiences: audiences.clone(),
            users: callers.users,
            groups: callers.groups,
            max_calls_per_minute: callers
                .max_calls_per_minute
                .and_then(|n| u32::try_from(n).ok()),
        }),
    };
    let secret_data = BTreeMap::from([(GATE_CONFIG_ITEM.to_owned(), serde_json::to_vec(&gate)?)]);
    let config_hash = config_hash(&secret_data, "");
    let deployment = spec.deployment.clone().unwrap_or_default();
    let pod = GatePod {
        owner: &owner,
        labels: owner.labels(),
        selector: BTreeMap::from([(TOOL_GATE_LABEL.to_owned(), owner.name.clone())]),
        pod_labels: owner.labels(),
        image: &options.gate_image,
        config_hash: &config_hash,
        replicas: deployment.replicas.unwrap_or(1),
        resources: deployment.resources,
        image_pull_secrets: Vec::new(),
        node_selector: deployment.node_selector,
        tolerations: deployment.tolerations,
        affinity: deployment.affinity,
    };
    let objects = ToolGateObjects {
        secret: owner.config_secret(&secret_data),
        service_account: pod.service_account(),
        role: owner.gate_role(options.grant_max_ttl.is_some()),
        role_binding: owner.gate_role_binding(owner.gate_name()),
        deployment: pod.deployment(),
        service: pod.service(),
    };
    Ok(RenderedToolGate {
        gate,
        config_hash,
        objects,
        url,
        route,
        audiences,
    })
}

/// The server behind the gate, resolved: a RemoteMCPServer of the ToolGate's namespace (its
/// url, protocol, headers and timeouts), or the inline url, named after the ToolGate. Both
/// are recorded as kind RemoteMCPServer (in gate.json and on the ApprovalRequests). Reached
/// through the operator's proxy when it has one and the server is in the cluster.
fn resolve_server(
    object: &str,
    tool_gate: &ToolGate,
    refs: &RefStore,
    options: &RenderOptions,
) -> Result<ResolvedServer> {
    let namespace = tool_gate.namespace().unwrap_or_default();
    let server = &tool_gate.spec.server;
    let name = tool_gate.server_name();
    let (endpoint, headers_object, headers_field) = match (&server.remote_mcp_server, &server.url) {
        (Some(remote), None) => {
            let found =
                refs.remote_mcp_server(&namespace, remote)
                    .ok_or_else(|| Error::RefNotFound {
                        object: object.to_owned(),
                        field: "spec.server.remoteMCPServer".into(),
                        missing: format!("RemoteMCPServer {namespace}/{remote}"),
                    })?;
            (
                tools::remote_endpoint(&namespace, remote, found)?,
                format!("RemoteMCPServer {namespace}/{remote}"),
                "spec.headersFrom",
            )
        }
        (None, Some(url)) => (
            Endpoint {
                protocol: server.protocol.unwrap_or_default(),
                url: url.clone(),
                headers_from: server.headers_from.clone(),
                timeout: tools::duration_field(object, "spec.server.timeout", &server.timeout)?,
                sse_read_timeout: tools::duration_field(
                    object,
                    "spec.server.sseReadTimeout",
                    &server.sse_read_timeout,
                )?,
                terminate_on_close: None,
                trust_tool_annotations: server.trust_tool_annotations.unwrap_or(false),
                accepted_tools: tools::accepted_tools(&server.accepted_tool_definitions),
            },
            object.to_owned(),
            "spec.server.headersFrom",
        ),
        _ => {
            return Err(Error::InvalidSpec {
                object: object.to_owned(),
                field: "spec.server".into(),
                message: "Invalid value: exactly one of remoteMCPServer and url must be set".into(),
            });
        }
    };
    let mut headers = BTreeMap::new();
    tools::resolve_headers(
        &endpoint.headers_from,
        &namespace,
        refs,
        &headers_object,
        headers_field,
        &mut headers,
    )?;
    let internal = super::proxy::is_internal_url(&endpoint.url, refs);
    let url_field = match server.remote_mcp_server {
        Some(_) => "spec.url",
        None => "spec.server.url",
    };
    let (url, headers) = tools::route_through(
        options.proxy_url.as_ref().filter(|_| internal),
        &headers_object,
        url_field,
        endpoint.url,
        headers,
    )?;
    Ok(ResolvedServer {
        namespace,
        name,
        kind: ToolServerKind::RemoteMCPServer,
        protocol: endpoint.protocol,
        url,
        headers,
        timeout: endpoint.timeout,
        sse_read_timeout: endpoint.sse_read_timeout,
        terminate_on_close: endpoint.terminate_on_close,
        tools: tool_gate.spec.tool_names.clone(),
        require_approval: tool_gate.spec.require_approval.clone(),
        allowed_headers: Vec::new(),
        trust_tool_annotations: endpoint.trust_tool_annotations,
        accepted_tools: endpoint.accepted_tools,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::gate_config::GateServer;

    fn tool_gate(yaml: &str) -> ToolGate {
        let mut tool_gate: ToolGate = serde_saphyr::from_str(yaml).unwrap();
        tool_gate.metadata.uid = Some("tg-uid".into());
        tool_gate
    }

    #[test]
    fn an_inline_server_is_named_after_the_tool_gate_and_callers_get_the_default_audience() {
        let tool_gate = tool_gate(
            "metadata: {name: pay, namespace: fin}\nspec: {server: {url: 'http://pay.fin:8080/mcp', timeout: 45s}, toolNames: [a, b], requireApproval: [b]}",
        );
        let rendered =
            render_tool_gate(&tool_gate, &RefStore::default(), &RenderOptions::default()).unwrap();
        assert_eq!(
            rendered.gate.servers[0].route,
            GateServer::route_for("fin", "pay")
        );
        assert_eq!(rendered.url, "http://pay-gate.fin.svc:8099");
        assert_eq!(
            rendered.route,
            "http://pay-gate.fin.svc:8099/servers/fin/pay/mcp"
        );
        assert_eq!(rendered.audiences, ["toolgate.kagent.dev/fin/pay"]);
        let callers = rendered.gate.callers.as_ref().unwrap();
        assert_eq!(callers.audiences, rendered.audiences);
        assert_eq!(rendered.gate.agent.kind, PolicyKind::ToolGate);
        assert_eq!(rendered.gate.agent.service_account, "pay-gate");
        assert_eq!(rendered.gate.servers[0].params.timeout, Some(45.into()));
        assert_eq!(rendered.objects.deployment.name_any(), "pay-gate");
    }

    #[test]
    fn escalation_is_checked_against_the_timeout_and_copied_into_the_gate() {
        let with = |steps: &str| {
            tool_gate(&format!(
                "metadata: {{name: pay, namespace: fin}}\nspec: {{server: {{url: 'http://pay.fin:8080/mcp'}}, toolNames: [a], requireApproval: [a], approval: {{timeout: 1h, escalation: {{warnBefore: 5m, steps: [{steps}]}}}}}}"
            ))
        };
        let rendered = render_tool_gate(
            &with("{after: 10m, approvers: {groups: [oncall]}, notifier: pager}"),
            &RefStore::default(),
            &RenderOptions::default(),
        )
        .unwrap();
        let escalation = rendered.gate.approval.escalation.unwrap();
        assert_eq!(escalation.steps[0].approvers.groups, ["oncall"]);
        assert_eq!(escalation.warn_before.as_deref(), Some("5m"));
        let error = render_tool_gate(
            &with("{after: 2h, approvers: {groups: [oncall]}}"),
            &RefStore::default(),
            &RenderOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("ToolGate fin/pay: spec.approval.escalation.steps[0].after: "),
            "{error}"
        );
    }

    #[test]
    fn a_rules_escalation_goes_to_the_gate_only_on_a_rule_that_asks_in_time() {
        let with = |action: &str, after: &str| {
            tool_gate(&format!(
                "metadata: {{name: pay, namespace: fin}}\nspec: {{server: {{url: 'http://pay.fin:8080/mcp'}}, toolNames: [a], approval: {{timeout: 1h, rules: [{{name: big, tool: a, action: {action}, escalation: {{steps: [{{after: {after}, approvers: {{users: [cfo]}}}}]}}}}]}}}}"
            ))
        };
        let render = |tool_gate: &ToolGate| {
            render_tool_gate(tool_gate, &RefStore::default(), &RenderOptions::default())
        };
        let rendered = render(&with("RequireApproval", "10m")).unwrap();
        let rule = &rendered.gate.servers[0].rules[0];
        assert_eq!(
            rule.escalation.as_ref().unwrap().steps[0].approvers.users,
            ["cfo"]
        );
        assert_eq!(
            render(&with("RequireApproval", "2h"))
                .unwrap_err()
                .to_string()
                .split(": ")
                .nth(1),
            Some("spec.approval.rules[0].escalation.steps[0].after")
        );
        let error = render(&with("Allow", "10m")).unwrap_err().to_string();
        assert!(
            error.starts_with(
                "ToolGate fin/pay: spec.approval.rules[0].escalation: Forbidden: only a RequireApproval rule"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_missing_remote_mcp_server_names_the_field() {
        let tool_gate = tool_gate(
            "metadata: {name: pay, namespace: fin}\nspec: {server: {remoteMCPServer: nope}, toolNames: [a]}",
        );
        let error = render_tool_gate(&tool_gate, &RefStore::default(), &RenderOptions::default())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "ToolGate fin/pay: spec.server.remoteMCPServer: RemoteMCPServer fin/nope not found"
        );
    }
}
