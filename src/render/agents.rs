//! Agents used as tools (`tools[].type: Agent`): the `remote_agents` of config.json.
//!
//! A called Agent is reached at its own A2A Service and runs its tools behind its own gate, so
//! calling it never skips that gate: what its tools need is decided by its own approval
//! settings, not the caller's.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::Agent;
use crate::api::agent::{ApprovalMode, Tool, ToolType};
use crate::contract::agent_config::RemoteAgent;
use crate::render::objects::AGENT_PORT;
use crate::render::proxy::ProxyUrl;
use crate::render::refs::{RefStore, agent_tool_targets};
use crate::render::tools::{may_reference, resolve_headers};
use crate::{Error, Result};

/// How deep a chain of agent tools may go (kagent's limit).
pub const MAX_AGENT_TOOL_DEPTH: usize = 10;

/// The tool name of an Agent: `<namespace>__NS__<name>` with `-` written `_` (kagent's).
pub fn tool_name(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
        .replace('-', "_")
        .replace('/', "__NS__")
}

/// Resolves the Agent tools of `agent`, checking each target exists,
/// is not the agent itself, allows the caller's namespace and closes no cycle. `mode` is the
/// caller's approval mode: a gated caller whose target does not gate gets a warning.
pub fn resolve_remote_agents(
    object: &str,
    agent: &Agent,
    refs: &RefStore,
    proxy: Option<&ProxyUrl>,
    mode: ApprovalMode,
    default_mode: ApprovalMode,
    warnings: &mut Vec<String>,
) -> Result<Vec<RemoteAgent>> {
    let namespace = agent.namespace().unwrap_or_default();
    let tools: &[Tool] = agent
        .spec
        .declarative
        .as_ref()
        .map_or(&[], |d| d.tools.as_slice());
    let mut remote_agents = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        if tool.tool_type != ToolType::Agent {
            continue;
        }
        let field = format!("spec.declarative.tools[{index}]");
        let invalid = |field: String, message: String| Error::InvalidSpec {
            object: object.to_owned(),
            field,
            message,
        };
        let target = tool.agent.as_ref().ok_or_else(|| {
            invalid(
                field.clone(),
                "Invalid value: type.agent must be specified for Agent filter.type".into(),
            )
        })?;
        let field = format!("{field}.agent");
        if let Some(kind) = target
            .kind
            .as_deref()
            .filter(|k| !k.is_empty() && *k != "Agent")
        {
            return Err(invalid(
                format!("{field}.kind"),
                format!("Unsupported value: {kind:?}: supported values: \"Agent\""),
            ));
        }
        if let Some(group) = target
            .api_group
            .as_deref()
            .filter(|g| !g.is_empty() && *g != "kagent.dev")
        {
            return Err(invalid(
                format!("{field}.apiGroup"),
                format!("Unsupported value: {group:?}: supported values: \"kagent.dev\""),
            ));
        }
        let target_namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| namespace.clone());
        if target_namespace == namespace && target.name == agent.name_any() {
            return Err(invalid(
                format!("{field}.name"),
                format!(
                    "Invalid value: {:?}: an agent cannot use itself as a tool",
                    target.name
                ),
            ));
        }
        let called =
            refs.agent(&target_namespace, &target.name)
                .ok_or_else(|| Error::RefNotFound {
                    object: object.to_owned(),
                    field: field.clone(),
                    missing: format!("Agent {target_namespace}/{}", target.name),
                })?;
        may_reference(
            object,
            &field,
            &format!("Agent {target_namespace}/{}", target.name),
            called.spec.allowed_namespaces.as_deref(),
            &namespace,
            &target_namespace,
            refs,
        )?;
        check_chain(object, &field, agent, called, refs)?;
        if mode.uses_gate() {
            let called_mode = called
                .spec
                .declarative
                .as_ref()
                .and_then(|d| d.approval.as_ref())
                .and_then(|a| a.mode)
                .unwrap_or(default_mode);
            if !called_mode.uses_gate() {
                warnings.push(format!(
                    "{object}: {field}: Agent {target_namespace}/{} runs in approval mode {}: the tools it calls for this agent are confirmed in its chat runtime only, not at a gate",
                    target.name,
                    called_mode.as_str()
                ));
            }
        }
        let mut headers = BTreeMap::new();
        resolve_headers(
            &tool.headers_from,
            &namespace,
            refs,
            object,
            &format!("spec.declarative.tools[{index}].headersFrom"),
            &mut headers,
        )?;
        let direct = format!("http://{}.{target_namespace}:{AGENT_PORT}", target.name);
        let (url, headers) = match proxy {
            Some(proxy) => proxy
                .route(&direct, &headers)
                .expect("an agent's A2A URL parses"),
            None => (direct, headers),
        };
        remote_agents.push(RemoteAgent {
            name: tool_name(&target_namespace, &target.name),
            url,
            headers,
            description: called.spec.description.clone().unwrap_or_default(),
        });
    }
    Ok(remote_agents)
}

/// Refuses a chain of agent tools from `caller` through `first` that comes back to an Agent
/// already on it, or that is deeper than [`MAX_AGENT_TOOL_DEPTH`]. Agents not at hand end their
/// branch (the controller fetches the whole chain; a missing one is reported when it renders).
fn check_chain(
    object: &str,
    field: &str,
    caller: &Agent,
    first: &Agent,
    refs: &RefStore,
) -> Result<()> {
    fn key(agent: &Agent) -> (String, String) {
        (agent.namespace().unwrap_or_default(), agent.name_any())
    }
    fn walk(
        agent: &Agent,
        path: &mut Vec<(String, String)>,
        refs: &RefStore,
    ) -> std::result::Result<(), String> {
        if path.len() > MAX_AGENT_TOOL_DEPTH {
            return Err(format!(
                "the chain of agent tools is deeper than {MAX_AGENT_TOOL_DEPTH}"
            ));
        }
        for target in agent_tool_targets(agent) {
            if path.contains(&target) {
                let chain: Vec<String> = path
                    .iter()
                    .chain(std::iter::once(&target))
                    .map(|(ns, name)| format!("{ns}/{name}"))
                    .collect();
                return Err(format!("agent tools form a cycle: {}", chain.join(" -> ")));
            }
            if let Some(next) = refs.agent(&target.0, &target.1) {
                path.push(target);
                walk(next, path, refs)?;
                path.pop();
            }
        }
        Ok(())
    }
    let mut path = vec![key(caller), key(first)];
    walk(first, &mut path, refs).map_err(|message| Error::InvalidSpec {
        object: object.to_owned(),
        field: field.to_owned(),
        message: format!("Invalid value: {message}"),
    })
}
