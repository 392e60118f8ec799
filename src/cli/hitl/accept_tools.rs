//! `kubectl hitl accept-tools`: accept tool definitions on their tool server object, so that a
//! gate calls out (and asks for every call of) a tool listed with another definition
//! (docs/policies.md, "Changed tool definitions").

use std::io::Write;

use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::error::CommandError;
use crate::api::agent::ToolServerKind;
use crate::api::approval_request::{ApprovalRequest, PolicyKind};
use crate::api::common::AcceptedToolDefinition;
use crate::api::{RemoteMCPServer, ToolGate};

/// What to accept: parsed from `remotemcpserver/NAME` or an ApprovalRequest's name.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// Every tool a RemoteMCPServer's status lists (or those named), as listed.
    Server(String),
    /// The definition an ApprovalRequest recorded of its tool, on the request's tool server.
    Request(String),
}

impl Target {
    /// `remotemcpserver/NAME` (also `rmcps/NAME` and `remotemcpservers/NAME`), else a request.
    pub fn parse(text: &str) -> Self {
        match text.split_once('/') {
            Some((kind, name))
                if ["remotemcpserver", "remotemcpservers", "rmcps"]
                    .contains(&kind.to_ascii_lowercase().as_str()) =>
            {
                Self::Server(name.to_owned())
            }
            _ => Self::Request(text.to_owned()),
        }
    }
}

/// Where accepted definitions are written, as it was read: the apply is guarded by its
/// resourceVersion.
enum Holder {
    /// `spec.acceptedToolDefinitions` of a RemoteMCPServer.
    Server(Box<RemoteMCPServer>),
    /// `spec.server.acceptedToolDefinitions` of a ToolGate with an inline url.
    ToolGate(Box<ToolGate>),
}

/// Accepts `target`'s definitions in `namespace` (`tools`: only these, for a server). Returns
/// the line to print, or the reason nothing was accepted.
pub async fn accept(
    client: &Client,
    namespace: &str,
    target: &Target,
    tools: &[String],
    out: &mut dyn Write,
) -> Result<Result<(), String>, CommandError> {
    let (holder, definitions) = match target {
        Target::Server(name) => {
            let servers: Api<RemoteMCPServer> = Api::namespaced(client.clone(), namespace);
            let Some(server) = servers.get_opt(name).await? else {
                return Ok(Err(format!("RemoteMCPServer {namespace}/{name} not found")));
            };
            match listed(&server, tools) {
                Ok(definitions) => (Holder::Server(Box::new(server)), definitions),
                Err(why) => return Ok(Err(format!("RemoteMCPServer {namespace}/{name}: {why}"))),
            }
        }
        Target::Request(name) => {
            let requests: Api<ApprovalRequest> = Api::namespaced(client.clone(), namespace);
            let Some(request) = requests.get_opt(name).await? else {
                return Ok(Err(format!("ApprovalRequest {namespace}/{name} not found")));
            };
            if !tools.is_empty() {
                return Ok(Err("--tool goes with remotemcpserver/NAME only".into()));
            }
            match recorded(client, namespace, &request).await? {
                Ok(found) => found,
                Err(why) => return Ok(Err(format!("ApprovalRequest {namespace}/{name}: {why}"))),
            }
        }
    };
    let (kind, name, path) = match &holder {
        Holder::Server(server) => (
            "remotemcpserver",
            server.name_any(),
            "spec.acceptedToolDefinitions",
        ),
        Holder::ToolGate(gate) => (
            "toolgate",
            gate.name_any(),
            "spec.server.acceptedToolDefinitions",
        ),
    };
    // The whole list as it is, with these entries replaced or added, applied against the
    // resourceVersion read: applying only the new entries would drop those this field manager
    // accepted before, and a change in between makes the apply fail rather than be lost.
    let params = PatchParams::apply("kubectl-hitl").force();
    match &holder {
        Holder::Server(current) => {
            let api = Api::<RemoteMCPServer>::namespaced(client.clone(), namespace);
            let body = json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                "metadata": {"name": name, "namespace": namespace,
                    "resourceVersion": current.resource_version()},
                "spec": {"acceptedToolDefinitions":
                    merged(&current.spec.accepted_tool_definitions, &definitions)},
            });
            api.patch(&name, &params, &Patch::Apply(&body)).await?;
        }
        Holder::ToolGate(current) => {
            let api = Api::<ToolGate>::namespaced(client.clone(), namespace);
            let body = json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "ToolGate",
                "metadata": {"name": name, "namespace": namespace,
                    "resourceVersion": current.resource_version()},
                "spec": {"server": {"acceptedToolDefinitions":
                    merged(&current.spec.server.accepted_tool_definitions, &definitions)}},
            });
            api.patch(&name, &params, &Patch::Apply(&body)).await?;
        }
    }
    for d in &definitions {
        writeln!(
            out,
            "{kind}/{name}: accepted {} (sha256 {}) in {path}",
            d.name,
            &d.definition_sha256[..12]
        )?;
    }
    Ok(Ok(()))
}

/// `current` with `accepted`'s entries in place of those of the same tools, and the others
/// after them.
fn merged(
    current: &[AcceptedToolDefinition],
    accepted: &[AcceptedToolDefinition],
) -> Vec<AcceptedToolDefinition> {
    let mut list: Vec<_> = current
        .iter()
        .map(|c| {
            accepted
                .iter()
                .find(|a| a.name == c.name)
                .unwrap_or(c)
                .clone()
        })
        .collect();
    list.extend(
        accepted
            .iter()
            .filter(|a| !current.iter().any(|c| c.name == a.name))
            .cloned(),
    );
    list
}

/// The definitions `server`'s status lists (only `tools`, when given), as accepted entries.
fn listed(
    server: &RemoteMCPServer,
    tools: &[String],
) -> Result<Vec<AcceptedToolDefinition>, String> {
    let discovered = server
        .status
        .as_ref()
        .map(|s| s.discovered_tools.as_slice())
        .unwrap_or_default();
    if discovered.is_empty() {
        return Err(
            "no tools listed in status.discoveredTools yet (its Accepted condition says why)"
                .into(),
        );
    }
    if let Some(missing) = tools
        .iter()
        .find(|t| !discovered.iter().any(|d| &d.name == *t))
    {
        return Err(format!("tool {missing:?} is not in status.discoveredTools"));
    }
    discovered
        .iter()
        .filter(|d| tools.is_empty() || tools.contains(&d.name))
        .map(|d| {
            let digest = d.definition_sha256.clone().ok_or_else(|| {
                format!(
                    "tool {:?} has no definitionSha256 in status.discoveredTools (listed by an older controller; it is listed again within five minutes)",
                    d.name
                )
            })?;
            Ok(AcceptedToolDefinition {
                name: d.name.clone(),
                definition_sha256: digest,
            })
        })
        .collect()
}

/// The definition `request` recorded of its tool, and the object that accepts it.
async fn recorded(
    client: &Client,
    namespace: &str,
    request: &ApprovalRequest,
) -> Result<Result<(Holder, Vec<AcceptedToolDefinition>), String>, CommandError> {
    let spec = &request.spec;
    let Some(annotations) = &spec.tool_annotations else {
        return Ok(Err(
            "it records no tool definition (spec.toolAnnotations): its gate never saw the tool listed"
                .into(),
        ));
    };
    let accepted = vec![AcceptedToolDefinition {
        name: spec.tool_name.clone(),
        definition_sha256: annotations.definition_sha256.clone(),
    }];
    let holder = if spec.agent_ref.kind == Some(PolicyKind::ToolGate) {
        let gates: Api<ToolGate> = Api::namespaced(client.clone(), namespace);
        let Some(gate) = gates.get_opt(&spec.agent_ref.name).await? else {
            return Ok(Err(format!(
                "its ToolGate {:?} is gone",
                spec.agent_ref.name
            )));
        };
        match &gate.spec.server.remote_mcp_server {
            Some(server) => return server_holder(client, namespace, server, accepted).await,
            None => Holder::ToolGate(Box::new(gate)),
        }
    } else if spec.tool_server.kind == ToolServerKind::RemoteMCPServer {
        if spec.tool_server.namespace != namespace {
            return Ok(Err(format!(
                "its tool server is RemoteMCPServer {}/{}: run again with -n {}",
                spec.tool_server.namespace, spec.tool_server.name, spec.tool_server.namespace
            )));
        }
        return server_holder(client, namespace, &spec.tool_server.name, accepted).await;
    } else {
        return Ok(Err(format!(
            "its tool server is a {}, which has no accepted definitions: its gates accept the first definition they list",
            spec.tool_server.kind.as_str()
        )));
    };
    Ok(Ok((holder, accepted)))
}

/// RemoteMCPServer `name` as it is now, to accept `accepted` on.
async fn server_holder(
    client: &Client,
    namespace: &str,
    name: &str,
    accepted: Vec<AcceptedToolDefinition>,
) -> Result<Result<(Holder, Vec<AcceptedToolDefinition>), String>, CommandError> {
    let servers: Api<RemoteMCPServer> = Api::namespaced(client.clone(), namespace);
    Ok(match servers.get_opt(name).await? {
        Some(server) => Ok((Holder::Server(Box::new(server)), accepted)),
        None => Err(format!("its RemoteMCPServer {namespace}/{name} is gone")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_servers_by_kind_else_requests() {
        assert_eq!(
            Target::parse("remotemcpserver/fs"),
            Target::Server("fs".into())
        );
        assert_eq!(Target::parse("RMCPS/fs"), Target::Server("fs".into()));
        assert_eq!(
            Target::parse("cleaner-delete-file-1a2b"),
            Target::Request("cleaner-delete-file-1a2b".into())
        );
    }

    #[test]
    fn accepting_replaces_the_tools_entries_and_keeps_the_others() {
        let entry = |name: &str, digest: &str| AcceptedToolDefinition {
            name: name.into(),
            definition_sha256: digest.repeat(64),
        };
        let current = [entry("a", "1"), entry("b", "2")];
        assert_eq!(
            merged(&current, &[entry("b", "3"), entry("c", "4")]),
            [entry("a", "1"), entry("b", "3"), entry("c", "4")]
        );
    }

    #[test]
    fn a_server_without_digests_or_the_tool_is_refused() {
        let server: RemoteMCPServer = serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
            "metadata": {"name": "fs", "namespace": "ns"},
            "spec": {"url": "http://x/mcp"},
            "status": {"discoveredTools": [
                {"name": "a", "definitionSha256": "ab".repeat(32)},
                {"name": "b"},
            ]},
        }))
        .unwrap();
        let a = listed(&server, &["a".into()]).unwrap();
        assert_eq!(a[0].definition_sha256, "ab".repeat(32));
        assert!(
            listed(&server, &[])
                .unwrap_err()
                .contains("\"b\" has no definitionSha256")
        );
        assert!(
            listed(&server, &["c".into()])
                .unwrap_err()
                .contains("\"c\" is not in")
        );
    }
}
