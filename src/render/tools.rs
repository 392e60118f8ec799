//! The tool servers of an Agent, resolved to URLs, headers and per-server tool policy.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;

use crate::api::RemoteMCPServer;
use crate::api::agent::{McpServerTool, Tool, ToolServerKind, ToolType};
use crate::api::common::{
    AcceptedToolDefinition, AllowedNamespaces, ValueRef, parse_duration_seconds,
};
use crate::api::remote_mcp_server::McpProtocol;
use crate::render::cross_namespace::{self, Verdict};
use crate::render::proxy::{ProxyUrl, is_internal_url};
use crate::render::refs::RefStore;
use crate::{Error, Result};

/// Timeout of a kmcp MCPServer that sets none (kmcp's CRD default).
const DEFAULT_MCP_SERVER_TIMEOUT: f64 = 30.0;

/// Annotation of a Service giving the MCP path (default `/mcp`).
pub const SERVICE_PATH_ANNOTATION: &str = "kagent.dev/mcp-service-path";
/// Annotation of a Service giving the MCP port.
pub const SERVICE_PORT_ANNOTATION: &str = "kagent.dev/mcp-service-port";
/// Annotation of a Service giving the protocol (`STREAMABLE_HTTP`, `streamable-http` or `SSE`).
pub const SERVICE_PROTOCOL_ANNOTATION: &str = "kagent.dev/mcp-service-protocol";

/// A tool server of the agent with everything needed to reach it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedServer {
    /// Namespace of the server object.
    pub namespace: String,
    /// Name of the server object.
    pub name: String,
    /// Kind of the server object.
    pub kind: ToolServerKind,
    /// Transport.
    pub protocol: McpProtocol,
    /// Real upstream URL.
    pub url: String,
    /// Real upstream headers, credentials included.
    pub headers: BTreeMap<String, String>,
    /// Request timeout in seconds.
    pub timeout: Option<f64>,
    /// SSE read timeout in seconds.
    pub sse_read_timeout: Option<f64>,
    /// Close the session when the client disconnects.
    pub terminate_on_close: Option<bool>,
    /// Tools the agent may use.
    pub tools: Vec<String>,
    /// Tools that need approval, on this server only.
    pub require_approval: Vec<String>,
    /// Headers forwarded from the A2A caller.
    pub allowed_headers: Vec<String>,
    /// Whether the server is trusted to assert its tools' MCP annotations.
    pub trust_tool_annotations: bool,
    /// Tool definitions accepted on the server object (tool name -> definition SHA-256).
    pub accepted_tools: BTreeMap<String, String>,
}

/// Connection settings taken from the server object.
pub struct Endpoint {
    /// Transport.
    pub protocol: McpProtocol,
    /// URL of the server.
    pub url: String,
    /// Headers to send, as written (resolved by [`resolve_headers`]).
    pub headers_from: Vec<ValueRef>,
    /// Request timeout in seconds.
    pub timeout: Option<f64>,
    /// SSE read timeout in seconds.
    pub sse_read_timeout: Option<f64>,
    /// Close the session when the client disconnects.
    pub terminate_on_close: Option<bool>,
    /// Whether the server is trusted to assert its tools' MCP annotations: only a
    /// RemoteMCPServer (or a ToolGate's inline url) can say so.
    pub trust_tool_annotations: bool,
    /// Tool definitions accepted on the server object: only a RemoteMCPServer (or a
    /// ToolGate's inline url) has them.
    pub accepted_tools: BTreeMap<String, String>,
}

/// Resolves every MCP server entry of an Agent (Agent tools are [`super::agents`]'). `object`
/// names the Agent in errors and warnings. With a `proxy`, servers in the cluster are reached
/// through it, as kagent reaches them: the resolved URL and headers are the proxied ones.
pub fn resolve_servers(
    object: &str,
    agent_namespace: &str,
    tools: &[Tool],
    refs: &RefStore,
    proxy: Option<&ProxyUrl>,
    warnings: &mut Vec<String>,
) -> Result<Vec<ResolvedServer>> {
    let mut seen = BTreeSet::new();
    let mut servers = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let field = format!("spec.declarative.tools[{index}]");
        if tool.tool_type == ToolType::Agent {
            continue;
        }
        let server = tool.mcp_server.as_ref().ok_or_else(|| Error::InvalidSpec {
            object: object.to_owned(),
            field: field.clone(),
            message: "Invalid value: type.mcpServer must be specified for McpServer filter.type"
                .into(),
        })?;
        let field = format!("{field}.mcpServer");
        let kind = server_kind(object, &field, server)?;
        let namespace = server
            .namespace
            .clone()
            .unwrap_or_else(|| agent_namespace.to_owned());
        if !seen.insert((kind, namespace.clone(), server.name.clone())) {
            return Err(Error::InvalidSpec {
                object: object.to_owned(),
                field: format!("{field}.name"),
                message: format!(
                    "Duplicate value: {:?}: {} {namespace}/{} is already listed; put all of its tools in one entry",
                    server.name,
                    kind.as_str(),
                    server.name
                ),
            });
        }
        // Services and kmcp MCPServers have no allowedNamespaces: kagent keeps them to their
        // own namespace.
        if namespace != agent_namespace && kind != ToolServerKind::RemoteMCPServer {
            return Err(Error::InvalidSpec {
                object: object.to_owned(),
                field: format!("{field}.namespace"),
                message: format!(
                    "Forbidden: cross-namespace reference to {} {namespace}/{} is not allowed from namespace {agent_namespace}: {} does not support cross-namespace references (use a RemoteMCPServer with spec.allowedNamespaces)",
                    kind.as_str(),
                    server.name,
                    kind.as_str()
                ),
            });
        }
        let (endpoint, proxied) = match kind {
            ToolServerKind::RemoteMCPServer => {
                let remote = refs
                    .remote_mcp_server(&namespace, &server.name)
                    .ok_or_else(|| {
                        not_found(object, &field, "RemoteMCPServer", &namespace, &server.name)
                    })?;
                let target = format!("RemoteMCPServer {namespace}/{}", server.name);
                let allowed = remote.spec.allowed_namespaces.as_ref();
                may_reference(
                    object,
                    &field,
                    &target,
                    allowed,
                    agent_namespace,
                    &namespace,
                    refs,
                )?;
                let endpoint = remote_endpoint(&namespace, &server.name, remote)?;
                let internal = is_internal_url(&endpoint.url, refs);
                (endpoint, internal)
            }
            ToolServerKind::Service => {
                let service = refs.service(&namespace, &server.name).ok_or_else(|| {
                    not_found(object, &field, "Service", &namespace, &server.name)
                })?;
                (service_endpoint(service, warnings)?, true)
            }
            ToolServerKind::MCPServer => (
                mcp_server_endpoint(object, &field, &namespace, &server.name, refs)?,
                true,
            ),
        };
        let mut headers = BTreeMap::new();
        resolve_headers(
            &endpoint.headers_from,
            &namespace,
            refs,
            &format!("{} {namespace}/{}", kind.as_str(), server.name),
            "spec.headersFrom",
            &mut headers,
        )?;
        resolve_headers(
            &tool.headers_from,
            agent_namespace,
            refs,
            object,
            &format!("spec.declarative.tools[{index}].headersFrom"),
            &mut headers,
        )?;
        let (url, headers) = route_through(
            proxy.filter(|_| proxied),
            &format!("{} {namespace}/{}", kind.as_str(), server.name),
            "spec.url",
            endpoint.url,
            headers,
        )?;
        servers.push(ResolvedServer {
            namespace,
            name: server.name.clone(),
            kind,
            protocol: endpoint.protocol,
            url,
            headers,
            timeout: endpoint.timeout,
            sse_read_timeout: endpoint.sse_read_timeout,
            terminate_on_close: endpoint.terminate_on_close,
            tools: server.tool_names.clone(),
            require_approval: server.require_approval.clone(),
            allowed_headers: server.allowed_headers.clone(),
            trust_tool_annotations: endpoint.trust_tool_annotations,
            accepted_tools: endpoint.accepted_tools,
        });
    }
    Ok(servers)
}

/// The URL and headers to reach a server at `url` with `headers`: through `proxy` when there
/// is one (the caller passes it only for servers in the cluster), else as they are. `object`
/// and `field` name where the URL is written, for the error when it is not one.
pub fn route_through(
    proxy: Option<&ProxyUrl>,
    object: &str,
    field: &str,
    url: String,
    headers: BTreeMap<String, String>,
) -> Result<(String, BTreeMap<String, String>)> {
    match proxy {
        Some(proxy) => proxy
            .route(&url, &headers)
            .ok_or_else(|| Error::InvalidSpec {
                object: object.to_owned(),
                field: field.to_owned(),
                message: format!("Invalid value: {url:?}: not a URL"),
            }),
        None => Ok((url, headers)),
    }
}

fn not_found(object: &str, field: &str, kind: &str, namespace: &str, name: &str) -> Error {
    Error::RefNotFound {
        object: object.to_owned(),
        field: field.to_owned(),
        missing: format!("{kind} {namespace}/{name}"),
    }
}

/// The kind of the referenced server, checking that apiGroup matches it.
fn server_kind(object: &str, field: &str, server: &McpServerTool) -> Result<ToolServerKind> {
    let kind = server.kind.unwrap_or_default();
    let group = server.api_group.as_deref().unwrap_or_default();
    let group_fits = match kind {
        ToolServerKind::RemoteMCPServer => matches!(group, "" | "kagent.dev"),
        ToolServerKind::Service => matches!(group, "" | "core"),
        ToolServerKind::MCPServer => matches!(group, "" | "kagent.dev"),
    };
    if group_fits {
        Ok(kind)
    } else {
        Err(Error::InvalidSpec {
            object: object.to_owned(),
            field: format!("{field}.apiGroup"),
            message: format!(
                "Unsupported value: {group:?}: kind {} belongs to API group {:?}",
                kind.as_str(),
                match kind {
                    ToolServerKind::RemoteMCPServer | ToolServerKind::MCPServer => "kagent.dev",
                    ToolServerKind::Service => "",
                }
            ),
        })
    }
}

/// Seconds of the duration `value` at `field` of `object`, if set.
pub fn duration_field(object: &str, field: &str, value: &Option<String>) -> Result<Option<f64>> {
    value
        .as_deref()
        .map(|text| {
            parse_duration_seconds(text).ok_or_else(|| Error::InvalidSpec {
                object: object.to_owned(),
                field: field.to_owned(),
                message: format!("Invalid value: {text:?}: must be a duration such as 30s or 5m"),
            })
        })
        .transpose()
}

/// Refuses a reference from `object` (in `source`) at `field` to `target` (in `target_ns`)
/// unless the target's `spec.allowedNamespaces` allows it (kagent's rule).
pub fn may_reference(
    object: &str,
    field: &str,
    target: &str,
    allowed: Option<&AllowedNamespaces>,
    source: &str,
    target_ns: &str,
    refs: &RefStore,
) -> Result<()> {
    let refused = |why: String| Error::InvalidSpec {
        object: object.to_owned(),
        field: format!("{field}.namespace"),
        message: format!(
            "Forbidden: cross-namespace reference to {target} is not allowed from namespace {source}{why}"
        ),
    };
    match cross_namespace::verdict(allowed, source, target_ns, refs.namespace_labels(source)) {
        Verdict::Allowed => Ok(()),
        Verdict::Refused => Err(refused(format!(
            " (its spec.allowedNamespaces {})",
            match allowed {
                None => "is unset, which allows only its own namespace".to_owned(),
                Some(_) => "does not include it".to_owned(),
            }
        ))),
        Verdict::BadSelector(why) => Err(refused(format!(
            ": its spec.allowedNamespaces.selector: {why}"
        ))),
        Verdict::NeedsLabels => Err(Error::RefNotFound {
            object: object.to_owned(),
            field: format!("{field}.namespace"),
            missing: format!(
                "Namespace {source} (its labels decide whether {target} allows the reference)"
            ),
        }),
    }
}

/// The endpoint a RemoteMCPServer `namespace/name` describes.
pub fn remote_endpoint(namespace: &str, name: &str, remote: &RemoteMCPServer) -> Result<Endpoint> {
    let server_object = format!("RemoteMCPServer {namespace}/{name}");
    let spec = &remote.spec;
    Ok(Endpoint {
        protocol: spec.protocol.unwrap_or_default(),
        url: spec.url.clone(),
        headers_from: spec.headers_from.clone(),
        timeout: duration_field(&server_object, "spec.timeout", &spec.timeout)?,
        sse_read_timeout: duration_field(
            &server_object,
            "spec.sseReadTimeout",
            &spec.sse_read_timeout,
        )?,
        terminate_on_close: spec.terminate_on_close,
        trust_tool_annotations: spec.trust_tool_annotations.unwrap_or(false),
        accepted_tools: accepted_tools(&spec.accepted_tool_definitions),
    })
}

/// Accepted tool definitions as the gate reads them: tool name -> definition SHA-256.
pub fn accepted_tools(accepted: &[AcceptedToolDefinition]) -> BTreeMap<String, String> {
    accepted
        .iter()
        .map(|a| (a.name.clone(), a.definition_sha256.clone()))
        .collect()
}

/// A kmcp MCPServer as an MCP endpoint, the way kagent reads it: Streamable HTTP on
/// `http://<name>.<namespace>:<deployment.port>/mcp`, timeout 30s unless set.
fn mcp_server_endpoint(
    object: &str,
    field: &str,
    namespace: &str,
    name: &str,
    refs: &RefStore,
) -> Result<Endpoint> {
    let server = refs
        .mcp_server(namespace, name)
        .ok_or_else(|| not_found(object, field, "MCPServer", namespace, name))?;
    let server_object = format!("MCPServer {namespace}/{name}");
    let port = server
        .spec
        .deployment
        .port
        .filter(|port| (1..=65535).contains(port))
        .ok_or_else(|| Error::InvalidSpec {
            object: server_object.clone(),
            field: "spec.deployment.port".into(),
            message: "Required value: the port of the MCP server is needed to reach it".into(),
        })?;
    let timeout = duration_field(&server_object, "spec.timeout", &server.spec.timeout)?
        .unwrap_or(DEFAULT_MCP_SERVER_TIMEOUT);
    Ok(Endpoint {
        protocol: McpProtocol::StreamableHttp,
        url: format!("http://{name}.{namespace}:{port}/mcp"),
        headers_from: Vec::new(),
        timeout: Some(timeout),
        sse_read_timeout: None,
        terminate_on_close: None,
        trust_tool_annotations: false,
        accepted_tools: BTreeMap::new(),
    })
}

/// A Service as an MCP endpoint, read from its `kagent.dev/mcp-service-*` annotations the way
/// kagent reads them: an unrecognised protocol means Streamable HTTP (with a warning here).
fn service_endpoint(service: &Service, warnings: &mut Vec<String>) -> Result<Endpoint> {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let object = format!("Service {namespace}/{name}");
    let annotations = service.annotations();
    let protocol = match annotations
        .get(SERVICE_PROTOCOL_ANNOTATION)
        .map(String::as_str)
    {
        None | Some("STREAMABLE_HTTP") => McpProtocol::StreamableHttp,
        // How kagent's own docs and examples spell it.
        Some(other) if other.eq_ignore_ascii_case("streamable-http") => McpProtocol::StreamableHttp,
        Some("SSE") => McpProtocol::Sse,
        Some(other) => {
            warnings.push(format!(
                "{object}: metadata.annotations[{SERVICE_PROTOCOL_ANNOTATION}]: unrecognised value {other:?} (expected \"STREAMABLE_HTTP\" or \"SSE\"); using STREAMABLE_HTTP, as kagent does"
            ));
            McpProtocol::StreamableHttp
        }
    };
    let path = annotations
        .get(SERVICE_PATH_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| "/mcp".to_owned());
    let annotated_port = annotations
        .get(SERVICE_PORT_ANNOTATION)
        .map(|text| {
            text.parse::<u16>().map_err(|_| Error::InvalidSpec {
                object: object.clone(),
                field: format!("metadata.annotations[{SERVICE_PORT_ANNOTATION}]"),
                message: format!("Invalid value: {text:?}: must be a port number"),
            })
        })
        .transpose()?;
    let ports = service
        .spec
        .as_ref()
        .and_then(|spec| spec.ports.as_deref())
        .unwrap_or_default();
    let port = annotated_port.map(i32::from).or_else(|| match ports {
        [only] => Some(only.port),
        _ => ports
            .iter()
            .find(|port| {
                port.app_protocol
                    .as_deref()
                    .is_some_and(|p| p.eq_ignore_ascii_case("mcp"))
            })
            .map(|port| port.port),
    });
    let port = port.ok_or_else(|| Error::InvalidSpec {
        object: object.clone(),
        field: "spec.ports".into(),
        message: format!(
            "Required value: no MCP port: set annotation {SERVICE_PORT_ANNOTATION}, expose a single port, or mark one with appProtocol: mcp"
        ),
    })?;
    Ok(Endpoint {
        protocol,
        url: format!("http://{name}.{namespace}:{port}{path}"),
        headers_from: Vec::new(),
        timeout: None,
        sse_read_timeout: None,
        terminate_on_close: None,
        trust_tool_annotations: false,
        accepted_tools: BTreeMap::new(),
    })
}

/// Adds resolved headers to `headers`; later entries win, as in kagent.
pub fn resolve_headers(
    headers_from: &[ValueRef],
    namespace: &str,
    refs: &RefStore,
    object: &str,
    field: &str,
    headers: &mut BTreeMap<String, String>,
) -> Result<()> {
    for (index, header) in headers_from.iter().enumerate() {
        let value = match (&header.value, &header.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(source)) => refs
                .value(source, namespace)
                .map_err(|missing| missing.into_error(object, &format!("{field}[{index}]")))?,
            (None, None) => {
                return Err(Error::InvalidSpec {
                    object: object.to_owned(),
                    field: format!("{field}[{index}]"),
                    message: "Required value: one of value and valueFrom must be set".into(),
                });
            }
        };
        headers.insert(header.name.clone(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(protocol: &str) -> Service {
        serde_saphyr::from_str(&format!(
            "metadata: {{name: fs, namespace: ns, annotations: {{kagent.dev/mcp-service-protocol: {protocol}}}}}\nspec: {{ports: [{{port: 3000}}]}}"
        ))
        .unwrap()
    }

    #[test]
    fn service_protocols_are_read_as_kagent_reads_them() {
        for (annotation, protocol, warned) in [
            ("STREAMABLE_HTTP", McpProtocol::StreamableHttp, false),
            ("streamable-http", McpProtocol::StreamableHttp, false),
            ("SSE", McpProtocol::Sse, false),
            ("websocket", McpProtocol::StreamableHttp, true),
        ] {
            let mut warnings = Vec::new();
            let endpoint = service_endpoint(&service(annotation), &mut warnings).unwrap();
            assert_eq!(endpoint.protocol, protocol, "{annotation}");
            assert_eq!(endpoint.url, "http://fs.ns:3000/mcp");
            assert_eq!(!warnings.is_empty(), warned, "{annotation}: {warnings:?}");
        }
    }
}
