//! `hitl-operator render`: validate manifests offline as the apiserver would and print every
//! object the controller would apply for the Agents and ToolGates among them, headed by what
//! the controller would report of each Agent that no object shows (its session store).

use std::io::Write;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use serde_json::Value;

use crate::api::{
    self, Agent, ApprovalGrant, ApprovalMode, GatePlacement, MCPServer, ModelConfig,
    RemoteMCPServer, ToolGate,
};
use crate::cidr::Cidr;
use crate::condition::Condition;
use crate::contract::gate_config::DEFAULT_MAX_OPEN_REQUESTS;
use crate::contract::session_store::DEFAULT_SESSION_STORE_URL;
use crate::manifest::{self, Document};
use crate::render::network::default_cluster_cidrs;
use crate::render::proxy::ProxyUrl;
use crate::render::refs::RefStore;
use crate::render::session_api::SessionApiUrl;
use crate::render::skills::DEFAULT_SKILLS_INIT_IMAGE;
use crate::render::tool_gate::render_tool_gate;
use crate::render::{
    DEFAULT_AGENT_IMAGE, DEFAULT_GATE_IMAGE, RenderOptions, describe_agent, render_agent,
};
use crate::render::{DEFAULT_GRANT_MAX_TTL, GrantMaxTtl};
use crate::validate::Schemas;

/// Output format of `render`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Multi-document YAML.
    Yaml,
    /// A JSON `List`.
    Json,
}

/// Arguments of `render`.
#[derive(Clone, Debug, clap::Args)]
pub struct RenderArgs {
    /// Manifest files or directories (multi-document YAML or JSON), read recursively.
    #[arg(short = 'f', long = "filename", required = true)]
    pub paths: Vec<PathBuf>,
    /// Also read the subdirectories of directories given with -f.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    pub output: Output,
    /// Namespace of objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Approval mode of Agents that set none.
    #[arg(long, value_enum, default_value = "Gate")]
    pub approval_mode: ApprovalMode,
    /// Gate placement of Agents that set none (the controller's --default-placement).
    #[arg(long, value_enum, default_value = "Sidecar")]
    pub default_placement: GatePlacement,
    /// Agent runtime image.
    #[arg(long, default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
    /// Approval gate image.
    #[arg(long, default_value = DEFAULT_GATE_IMAGE)]
    pub gate_image: String,
    /// The cluster's internal address ranges, comma-separated or repeated: closed to agent
    /// pods in Gateway placement (the controller's --cluster-cidrs).
    #[arg(long, value_delimiter = ',', default_values_t = default_cluster_cidrs())]
    pub cluster_cidrs: Vec<Cidr>,
    /// kagent's proxy for in-cluster tool servers and agents (the controller's --proxy-url).
    #[arg(long)]
    pub proxy_url: Option<ProxyUrl>,
    /// hitl-operator's session store, the runtime's KAGENT_URL unless --kagent-url is set (the
    /// controller's --session-store-url).
    #[arg(long, default_value = DEFAULT_SESSION_STORE_URL)]
    pub session_store_url: SessionApiUrl,
    /// A kagent controller that serves the runtime's sessions and tasks instead of the
    /// session store (the controller's --kagent-url).
    #[arg(long)]
    pub kagent_url: Option<SessionApiUrl>,
    /// kagent's gRPC controller API, rendered as KAGENT_GRPC_URL (the controller's
    /// --kagent-grpc-url).
    #[arg(long)]
    pub kagent_grpc_url: Option<String>,
    /// Image of the init container that fetches skills (the controller's --skills-init-image).
    #[arg(long, default_value = DEFAULT_SKILLS_INIT_IMAGE)]
    pub skills_init_image: String,
    /// Longest lifetime of an ApprovalGrant the gates honour, or `off` (the controller's
    /// --grant-max-ttl).
    #[arg(long, default_value = DEFAULT_GRANT_MAX_TTL)]
    pub grant_max_ttl: GrantMaxTtl,
    /// Open ApprovalRequests an Agent that sets no maxOpenRequests may hold, 1 to 1000 (the
    /// controller's --default-max-open-requests).
    #[arg(
        long,
        default_value_t = DEFAULT_MAX_OPEN_REQUESTS,
        value_parser = clap::value_parser!(u32).range(1..=1000)
    )]
    pub default_max_open_requests: u32,
    /// Render Agents whose pods can reach the node next to a gate instead of refusing them;
    /// they are reported GateIsolated=False (the controller's --allow-agent-node-access).
    #[arg(
        long,
        default_value_t = false,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub allow_agent_node_access: bool,
}

/// What a render produced: objects to print, or problems (one line each), plus warnings.
#[derive(Debug, Default)]
pub struct RenderReport {
    /// Rendered objects, in order.
    pub objects: Vec<Value>,
    /// Problems that make the render fail.
    pub problems: Vec<String>,
    /// Things worth a look that do not fail the render.
    pub warnings: Vec<String>,
    /// What the controller would write in each Agent's status that no rendered object is
    /// about: its session store (`status.sessionStore`), one line per Agent.
    pub notes: Vec<String>,
}

fn object_name(value: &Value) -> String {
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    format!("{namespace}/{name}")
}

fn typed<T: serde::de::DeserializeOwned>(document: &Document) -> Result<T, String> {
    serde_json::from_value(document.value.clone()).map_err(|error| {
        format!(
            "{}: {} {}: {error}",
            document.file,
            document.kind(),
            object_name(&document.value)
        )
    })
}

/// Whether a document is a kmcp MCPServer, which hitl-operator reads as a tool server.
fn is_kmcp(api_version: &str, kind: &str) -> bool {
    api_version == "kagent.dev/v1alpha1" && kind == "MCPServer"
}

/// Validates and renders `documents`. Every namespace an object is in counts as existing
/// (the apiserver would not hold the object otherwise), as do Namespace documents.
pub fn render_documents(
    mut documents: Vec<Document>,
    namespace: &str,
    options: &RenderOptions,
) -> RenderReport {
    let schemas = Schemas::shared();
    let mut report = RenderReport::default();
    let mut store = RefStore::default();
    let mut agents = Vec::new();
    let mut tool_gates = Vec::new();
    let mut namespaces = std::collections::BTreeSet::new();
    for document in &mut documents {
        if let Some(meta) = document
            .value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
        {
            let object_namespace = meta
                .entry("namespace")
                .or_insert_with(|| Value::String(namespace.to_owned()));
            if let Some(name) = object_namespace.as_str() {
                namespaces.insert(name.to_owned());
            }
        }
        let (api_version, kind) = (document.api_version(), document.kind());
        let ours = api_version == format!("{}/{}", api::GROUP, api::VERSION);
        if ours && schemas.knows(kind) {
            if let Err(invalid) = schemas.validate(&document.value, None) {
                report.problems.extend(
                    invalid
                        .lines()
                        .into_iter()
                        .map(|line| format!("{}: {line}", document.file)),
                );
                continue;
            }
        } else if api_version.starts_with(&format!("{}/", api::GROUP))
            && !is_kmcp(api_version, kind)
        {
            report.problems.push(format!(
                "{}: {kind} {}: apiVersion {api_version:?} kind {kind:?} is not served by hitl-operator (it serves Agent, ToolGate, RemoteMCPServer, ModelConfig, ApprovalRequest, ApprovalNotifier and ApprovalGrant in {}/{})",
                document.file,
                object_name(&document.value),
                api::GROUP,
                api::VERSION
            ));
            continue;
        }
        let added = match (ours, kind) {
            (true, "Agent") => typed::<Agent>(document).map(|agent| {
                store.insert_agent(agent.clone());
                agents.push((document.file.clone(), agent))
            }),
            (true, "ToolGate") => typed::<ToolGate>(document)
                .map(|tool_gate| tool_gates.push((document.file.clone(), tool_gate))),
            (false, "MCPServer") if is_kmcp(api_version, kind) => {
                typed::<MCPServer>(document).map(|o| store.insert_mcp_server(o))
            }
            (false, "Namespace") if api_version == "v1" => {
                typed::<Namespace>(document).map(|o| store.insert_namespace(o))
            }
            (true, "ModelConfig") => {
                typed::<ModelConfig>(document).map(|o| store.insert_model_config(o))
            }
            (true, "RemoteMCPServer") => {
                typed::<RemoteMCPServer>(document).map(|o| store.insert_remote_mcp_server(o))
            }
            (true, "ApprovalGrant") => typed::<ApprovalGrant>(document).and_then(|grant| {
                grant_condition_compiles(&grant).map_err(|why| {
                    format!(
                        "{}: ApprovalGrant {}: spec.when: {why}",
                        document.file,
                        object_name(&document.value)
                    )
                })
            }),
            (false, "Secret") if api_version == "v1" => {
                typed::<Secret>(document).map(|o| store.insert_secret(o))
            }
            (false, "ConfigMap") if api_version == "v1" => {
                typed::<ConfigMap>(document).map(|o| store.insert_config_map(o))
            }
            (false, "Service") if api_version == "v1" => {
                typed::<Service>(document).map(|o| store.insert_service(o))
            }
            _ => Ok(()),
        };
        if let Err(problem) = added {
            report.problems.push(problem);
        }
    }
    for name in namespaces {
        if store.namespace(&name).is_none() {
            store.insert_namespace(Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(name),
                    ..Default::default()
                },
                ..Namespace::default()
            });
        }
    }
    for (file, agent) in &agents {
        match render_agent(agent, &store, options) {
            Ok(rendered) => {
                report
                    .warnings
                    .extend(rendered.warnings.iter().map(|w| format!("{file}: {w}")));
                report.notes.push(format!(
                    "{}: status.sessionStore: {} ({}, the runtime's KAGENT_URL)",
                    describe_agent(agent),
                    rendered.session_api.url(),
                    rendered.session_api.server()
                ));
                // What the controller reports as GateIsolated=False.
                if let Some(isolation) = rendered.isolation.filter(|i| !i.isolated) {
                    report.warnings.push(format!(
                        "{file}: {}: GateIsolated=False ({}): {}",
                        describe_agent(agent),
                        isolation.reason,
                        isolation.message
                    ));
                }
                match rendered.objects.to_values() {
                    Ok(values) => report.objects.extend(values),
                    Err(error) => report.problems.push(format!("{file}: {error}")),
                }
            }
            Err(error) => report.problems.push(format!("{file}: {error}")),
        }
    }
    for (file, tool_gate) in &tool_gates {
        match render_tool_gate(tool_gate, &store, options)
            .and_then(|rendered| Ok(rendered.objects.to_values()?))
        {
            Ok(values) => report.objects.extend(values),
            Err(error) => report.problems.push(format!("{file}: {error}")),
        }
    }
    report
}

/// Formats rendered objects.
pub fn format_objects(objects: &[Value], output: Output) -> String {
    match output {
        Output::Yaml => objects
            .iter()
            .map(|object| {
                format!(
                    "---\n{}",
                    serde_saphyr::to_string(object).expect("JSON values serialize to YAML")
                )
            })
            .collect(),
        Output::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            serde_json::to_string_pretty(&list).expect("JSON values serialize") + "\n"
        }
    }
}

/// Whether the `when` of `grant`, if any, compiles as the gate will compile it (a grant whose
/// condition does not compile covers nothing).
fn grant_condition_compiles(grant: &ApprovalGrant) -> Result<(), String> {
    match &grant.spec.when {
        Some(when) => Condition::compile(when).map(drop),
        None => Ok(()),
    }
}

/// Runs `render`; returns the process exit code (0 ok, 1 problems found).
pub fn run(args: &RenderArgs) -> u8 {
    let options = RenderOptions {
        default_approval_mode: args.approval_mode,
        default_placement: args.default_placement,
        agent_image: args.agent_image.clone(),
        gate_image: args.gate_image.clone(),
        cluster_cidrs: args.cluster_cidrs.clone(),
        proxy_url: args.proxy_url.clone(),
        skills_init_image: args.skills_init_image.clone(),
        grant_max_ttl: args.grant_max_ttl.0,
        max_open_requests: args.default_max_open_requests,
        session_store_url: args.session_store_url.clone(),
        kagent_url: args.kagent_url.clone(),
        kagent_grpc_url: args.kagent_grpc_url.clone(),
        allow_agent_node_access: args.allow_agent_node_access,
    };
    let documents = match manifest::load(&args.paths, args.recursive) {
        Ok(documents) => documents,
        Err(error) => {
            eprintln!("error: {error}");
            return 1;
        }
    };
    let report = render_documents(documents, &args.namespace, &options);
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    if !report.problems.is_empty() {
        for problem in &report.problems {
            eprintln!("error: {problem}");
        }
        return 1;
    }
    let mut text = String::new();
    for note in &report.notes {
        match args.output {
            // A comment ahead of the documents: the output stays what `kubectl apply` takes.
            Output::Yaml => text.push_str(&format!("# {note}\n")),
            Output::Json => eprintln!("note: {note}"),
        }
    }
    text.push_str(&format_objects(&report.objects, args.output));
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => 0,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(error) => {
            eprintln!("error: writing output: {error}");
            1
        }
    }
}
