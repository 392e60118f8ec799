//! Pure rendering: an Agent and the objects it references become config.json, gate.json and
//! the Kubernetes objects the controller applies; a ToolGate, gate.json and its gate's objects
//! ([`tool_gate`]). No I/O, no clock: identical input gives
//! byte-identical output.

pub mod agent_volumes;
pub mod agents;
pub mod context;
pub mod cross_namespace;
pub mod isolation;
pub mod memory;
pub mod model;
pub mod network;
pub mod node_access;
pub mod objects;
pub mod prompt;
pub mod proxy;
pub mod refs;
pub mod rules;
pub mod runtime_version;
pub mod session_api;
pub mod skills;
pub mod tool_gate;
pub mod tools;

use std::collections::BTreeMap;

use jiff::SignedDuration;
use kube::ResourceExt;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::api::agent::DeclarativeAgentSpec;
use crate::api::agent::{AgentType, ApprovalRule, ApprovalSettings};
use crate::api::approval_request::PolicyKind;
use crate::api::common::parse_duration_seconds;
use crate::api::remote_mcp_server::McpProtocol;
use crate::api::tool_gate::ToolGateApproval;
use crate::api::{Agent, ApprovalMode, GatePlacement};
use crate::cidr::Cidr;
use crate::contract::agent_config::{AgentConfig, McpParams, McpToolServer, RemoteAgent};
use crate::contract::gate_config::{
    AgentIdentity, DEFAULT_MAX_OPEN_REQUESTS, GATE_LISTEN, GATE_METRICS_LISTEN, GATEWAY_LISTEN,
    GateApproval, GateConfig, GateServer,
};
use crate::contract::mounts::{AGENT_CARD_ITEM, AGENT_CONFIG_ITEM, GATE_CONFIG_ITEM};
use crate::{Error, Result};
use isolation::Isolation;
pub use objects::AgentObjects;
use proxy::ProxyUrl;
use refs::{DEFAULT_MODEL_CONFIG, RefStore};
use session_api::{SessionApi, SessionApiUrl};
use tools::ResolvedServer;

/// Default agent runtime image (kagent's ADK runtime).
pub const DEFAULT_AGENT_IMAGE: &str = "cr.kagent.dev/kagent-dev/kagent/app:0.7.4";
/// Default gate image: this crate's image, same version.
pub const DEFAULT_GATE_IMAGE: &str = concat!(
    "ghcr.io/hitl-operator/hitl-operator:",
    env!("CARGO_PKG_VERSION")
);
/// Default seconds an ApprovalRequest can be decided.
pub const DEFAULT_APPROVAL_TIMEOUT: f64 = 3600.0;
/// Default seconds the gate holds a gated call open.
pub const DEFAULT_WAIT_TIMEOUT: f64 = 30.0;
/// Default seconds finished ApprovalRequests are kept.
pub const DEFAULT_TTL_AFTER_FINISHED: f64 = 86400.0;
/// Extra seconds, beyond waitTimeout, a runtime must wait for a gated server.
const GATE_TIMEOUT_MARGIN: f64 = 10.0;

/// Operator-wide settings the renderer needs.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderOptions {
    /// Mode for Agents that set none.
    pub default_approval_mode: ApprovalMode,
    /// Gate placement for Agents that set none (docs/placement.md, "The default").
    pub default_placement: GatePlacement,
    /// Agent runtime image.
    pub agent_image: String,
    /// Approval gate image.
    pub gate_image: String,
    /// The cluster's internal address ranges (pods, Services, nodes): closed to the agent
    /// pods in Gateway placement, and where a tool server counts as in-cluster.
    pub cluster_cidrs: Vec<Cidr>,
    /// kagent's controller-wide proxy for in-cluster tool servers and agents (`--proxy-url`).
    /// Where a gate runs, only the gate's leg to a server goes through it.
    pub proxy_url: Option<ProxyUrl>,
    /// Image of the init container that fetches skills.
    pub skills_init_image: String,
    /// The longest lifetime of an ApprovalGrant the gates honour; `None`: grants are off.
    pub grant_max_ttl: Option<SignedDuration>,
    /// Open ApprovalRequests an Agent that sets no `maxOpenRequests` may hold.
    pub max_open_requests: u32,
    /// hitl-operator's session store, which serves the runtime's sessions and tasks for every
    /// Agent unless `kagent_url` is set (`--session-store-url`).
    pub session_store_url: SessionApiUrl,
    /// A kagent controller that serves the runtime's sessions and tasks for every Agent
    /// instead of the session store (`--kagent-url`).
    pub kagent_url: Option<SessionApiUrl>,
    /// kagent's gRPC controller API for the runtimes that need it (`--kagent-grpc-url`).
    pub kagent_grpc_url: Option<String>,
    /// Render Agents whose pods reach the node next to a gate (`--allow-agent-node-access`):
    /// the gate can then be bypassed, and `GateIsolated` says so. Off: they are refused.
    pub allow_agent_node_access: bool,
}

/// Default longest lifetime of an ApprovalGrant: one day.
pub const DEFAULT_GRANT_MAX_TTL: &str = "24h";

/// `--grant-max-ttl`: a duration (`24h`, `90m`), or `off` to turn grants off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantMaxTtl(pub Option<SignedDuration>);

impl std::str::FromStr for GrantMaxTtl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Self(None));
        }
        let ttl: SignedDuration = s
            .parse()
            .map_err(|e| format!("{s:?} is not a duration such as 24h or 90m, nor off: {e}"))?;
        if ttl <= SignedDuration::ZERO {
            return Err(format!("{s:?} must be positive (or off)"));
        }
        Ok(Self(Some(ttl)))
    }
}

impl std::fmt::Display for GrantMaxTtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ttl) => write!(f, "{ttl:#}"),
            None => f.write_str("off"),
        }
    }
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            default_approval_mode: ApprovalMode::Gate,
            default_placement: GatePlacement::Sidecar,
            agent_image: DEFAULT_AGENT_IMAGE.to_owned(),
            gate_image: DEFAULT_GATE_IMAGE.to_owned(),
            cluster_cidrs: network::default_cluster_cidrs(),
            proxy_url: None,
            skills_init_image: skills::DEFAULT_SKILLS_INIT_IMAGE.to_owned(),
            grant_max_ttl: DEFAULT_GRANT_MAX_TTL
                .parse::<GrantMaxTtl>()
                .ok()
                .and_then(|t| t.0),
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            session_store_url: SessionApiUrl::default_store(),
            kagent_url: None,
            kagent_grpc_url: None,
            allow_agent_node_access: false,
        }
    }
}

/// Everything rendered for one Agent.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedAgent {
    /// The effective approval mode.
    pub mode: ApprovalMode,
    /// Where the gate runs (meaningful when `mode` uses the gate).
    pub placement: GatePlacement,
    /// config.json.
    pub config: AgentConfig,
    /// gate.json, in Gate and Both modes.
    pub gate: Option<GateConfig>,
    /// SHA-256 (hex) over everything rendered into the Secret plus the model key's hash.
    pub config_hash: String,
    /// The objects to apply.
    pub objects: AgentObjects,
    /// Things that render but deserve a look (shown by `render`, put in conditions).
    pub warnings: Vec<String>,
    /// Whether the agent can reach gated servers only through the gate; `None` without a
    /// gate or without gated tools.
    pub isolation: Option<Isolation>,
    /// Who serves the runtime's sessions and tasks (its `KAGENT_URL`, the Agent's
    /// `status.sessionStore`).
    pub session_api: SessionApi,
}

/// The Agent's approval settings with defaults applied, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApprovalTimings {
    /// Seconds a request can be decided.
    pub timeout: f64,
    /// Seconds the gate holds a call open.
    pub wait_timeout: f64,
    /// Seconds finished requests are kept.
    pub ttl_after_finished: f64,
}

/// The approval settings of an Agent (`spec.declarative.approval`) or a ToolGate
/// (`spec.approval`) that both read alike, as written.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApprovalFields<'a> {
    /// Where they are written, for errors.
    pub field: &'a str,
    /// `timeout`.
    pub timeout: Option<&'a String>,
    /// `waitTimeout`.
    pub wait_timeout: Option<&'a String>,
    /// `ttlAfterFinished`.
    pub ttl_after_finished: Option<&'a String>,
    /// `maxOpenRequests`.
    pub max_open_requests: Option<i32>,
}

impl<'a> ApprovalFields<'a> {
    /// An Agent's.
    pub fn of_agent(settings: Option<&'a ApprovalSettings>) -> Self {
        Self {
            field: "spec.declarative.approval",
            timeout: settings.and_then(|s| s.timeout.as_ref()),
            wait_timeout: settings.and_then(|s| s.wait_timeout.as_ref()),
            ttl_after_finished: settings.and_then(|s| s.ttl_after_finished.as_ref()),
            max_open_requests: settings.and_then(|s| s.max_open_requests),
        }
    }

    /// A ToolGate's.
    pub fn of_tool_gate(approval: Option<&'a ToolGateApproval>) -> Self {
        Self {
            field: "spec.approval",
            timeout: approval.and_then(|a| a.timeout.as_ref()),
            wait_timeout: approval.and_then(|a| a.wait_timeout.as_ref()),
            ttl_after_finished: approval.and_then(|a| a.ttl_after_finished.as_ref()),
            max_open_requests: approval.and_then(|a| a.max_open_requests),
        }
    }
}

/// Reads the approval timings of an Agent's or ToolGate's settings, defaults applied; `object`
/// names the Agent or ToolGate in errors.
pub fn approval_timings(object: &str, fields: &ApprovalFields<'_>) -> Result<ApprovalTimings> {
    let read = |field: &str, value: Option<&String>, default: f64| -> Result<f64> {
        match value {
            None => Ok(default),
            Some(text) => parse_duration_seconds(text)
                .filter(|seconds| *seconds > 0.0)
                .ok_or_else(|| Error::InvalidSpec {
                    object: object.to_owned(),
                    field: format!("{}.{field}", fields.field),
                    message: format!(
                        "Invalid value: {text:?}: must be a positive duration such as 30s, 5m or 1h"
                    ),
                }),
        }
    };
    let timings = ApprovalTimings {
        timeout: read("timeout", fields.timeout, DEFAULT_APPROVAL_TIMEOUT)?,
        wait_timeout: read("waitTimeout", fields.wait_timeout, DEFAULT_WAIT_TIMEOUT)?,
        ttl_after_finished: read(
            "ttlAfterFinished",
            fields.ttl_after_finished,
            DEFAULT_TTL_AFTER_FINISHED,
        )?,
    };
    if timings.wait_timeout > timings.timeout {
        return Err(Error::InvalidSpec {
            object: object.to_owned(),
            field: format!("{}.waitTimeout", fields.field),
            message: format!(
                "Invalid value: {:?}: must not exceed timeout ({:?})",
                fields.wait_timeout.cloned().unwrap_or_default(),
                fields.timeout.cloned().unwrap_or_else(|| "1h".into())
            ),
        });
    }
    Ok(timings)
}

/// The cap on open ApprovalRequests: the `maxOpenRequests` in `fields` if set, else `default`
/// (the operator's); `object` names the Agent or ToolGate in errors.
fn max_open_requests(object: &str, fields: &ApprovalFields<'_>, default: u32) -> Result<u32> {
    match fields.max_open_requests {
        None => Ok(default),
        Some(cap) => u32::try_from(cap)
            .ok()
            .filter(|cap| *cap >= 1)
            .ok_or_else(|| Error::InvalidSpec {
                object: object.to_owned(),
                field: format!("{}.maxOpenRequests", fields.field),
                message: format!("Invalid value: {cap}: must be at least 1"),
            }),
    }
}

/// `Kind namespace/name` of an Agent, as used in messages.
pub fn describe_agent(agent: &Agent) -> String {
    format!(
        "Agent {}/{}",
        agent.namespace().unwrap_or_default(),
        agent.name_any()
    )
}

/// Seconds as a JSON number, integral when whole (kagent prints `30`, not `30.0`).
pub fn seconds_number(seconds: f64) -> serde_json::Number {
    if seconds.fract() == 0.0 && seconds.abs() < 9.0e15 {
        serde_json::Number::from(seconds as i64)
    } else {
        serde_json::Number::from_f64(seconds).unwrap_or_else(|| serde_json::Number::from(0))
    }
}

/// Renders an Agent: validates what the schema cannot, resolves references in `refs` and
/// builds config.json, gate.json and the objects.
pub fn render_agent(
    agent: &Agent,
    refs: &RefStore,
    options: &RenderOptions,
) -> Result<RenderedAgent> {
    let object = describe_agent(agent);
    let namespace = agent.namespace().unwrap_or_default();
    if agent.spec.agent_type == AgentType::Byo {
        return Err(Error::InvalidSpec {
            object,
            field: "spec.type".into(),
            message: "Unsupported value: \"BYO\": hitl-operator runs Declarative agents only"
                .into(),
        });
    }
    let declarative = agent
        .spec
        .declarative
        .as_ref()
        .ok_or_else(|| Error::InvalidSpec {
            object: object.clone(),
            field: "spec.declarative".into(),
            message: "Required value: spec.declarative is required when type is Declarative".into(),
        })?;
    let mode = declarative
        .approval
        .as_ref()
        .and_then(|approval| approval.mode)
        .unwrap_or(options.default_approval_mode);
    let approval_fields = ApprovalFields::of_agent(declarative.approval.as_ref());
    let timings = approval_timings(&object, &approval_fields)?;
    let max_open_requests =
        max_open_requests(&object, &approval_fields, options.max_open_requests)?;
    let escalation = declarative
        .approval
        .as_ref()
        .and_then(|a| a.escalation.as_deref())
        .filter(|e| !e.steps.is_empty() || e.warn_before.is_some());
    if let Some(escalation) = escalation {
        escalation
            .check(timings.timeout)
            .map_err(|(field, message)| Error::InvalidSpec {
                object: object.clone(),
                field: format!("spec.declarative.approval.escalation.{field}"),
                message,
            })?;
    }
    let placement = gate_placement(&object, declarative, mode, options.default_placement)?;
    agent_volumes::check(&object, agent, mode.uses_gate().then_some(placement))?;
    let refuse_node_access = mode.uses_gate() && !options.allow_agent_node_access;
    if refuse_node_access {
        // The Agent's own fields first, before any reference is looked up.
        refuse_node_access_of(&object, mode, &node_access::agent(agent))?;
    }
    let approval_rules = declarative
        .approval
        .as_ref()
        .map(|approval| approval.rules.as_slice())
        .unwrap_or_default();
    rules::check_rules(
        &object,
        approval_rules,
        &declarative.tools,
        mode,
        declarative.approval.as_ref().and_then(|a| a.mode).is_none(),
    )?;
    rules::check_rule_escalations(
        &object,
        "spec.declarative.approval.rules",
        approval_rules,
        timings.timeout,
    )?;

    let model_name = declarative
        .model_config
        .as_deref()
        .unwrap_or(DEFAULT_MODEL_CONFIG);
    let model_config =
        refs.model_config(&namespace, model_name)
            .ok_or_else(|| Error::RefNotFound {
                object: object.clone(),
                field: "spec.declarative.modelConfig".into(),
                missing: format!("ModelConfig {namespace}/{model_name}"),
            })?;
    let mut model = model::render_model(model_config, refs)?;
    let mut model_hashes = vec![model::secret_hash(model_config)];
    let memory = match &declarative.memory {
        Some(spec) => {
            let memory = memory::render_memory(&object, &namespace, spec, refs)?;
            if spec.model_config != model_name {
                model_hashes.push(memory.secret_hash.clone());
            }
            model.merge(memory.model, &object, memory::MEMORY_MODEL_FIELD)?;
            Some(memory.config)
        }
        None => None,
    };
    agent_volumes::check_reads(
        &object,
        agent,
        mode.uses_gate().then_some(placement),
        &model,
        "spec.declarative.modelConfig",
    )?;
    let context = declarative
        .context
        .as_ref()
        .map(|context| {
            context::render_context(&object, &namespace, context, model_name, &mut model, refs)
        })
        .transpose()?;

    let instruction = match (
        &declarative.system_message,
        &declarative.system_message_from,
    ) {
        (Some(message), _) => message.clone(),
        (None, Some(source)) => refs
            .value(source, &namespace)
            .map_err(|missing| missing.into_error(&object, "spec.declarative.systemMessageFrom"))?,
        (None, None) => String::new(),
    };

    let mut warnings = std::mem::take(&mut model.warnings);
    let proxy = options.proxy_url.as_ref();
    let servers = tools::resolve_servers(
        &object,
        &namespace,
        &declarative.tools,
        refs,
        proxy,
        &mut warnings,
    )?;
    let remote_agents = agents::resolve_remote_agents(
        &object,
        agent,
        refs,
        proxy,
        mode,
        options.default_approval_mode,
        &mut warnings,
    )?;
    let skills_pod = match &agent.spec.skills {
        Some(skills) => skills::skills_pod(
            &object,
            skills,
            &options.skills_init_image,
            declarative
                .deployment
                .as_ref()
                .and_then(|d| d.security_context.clone()),
        )?,
        None => None,
    };
    if skills_pod.is_some() && mode.uses_gate() {
        warnings.push(format!(
            "{object}: spec.skills: the agent container is not made privileged for kagent's skill sandbox in approval mode {}: a privileged container could reach the gate's credentials through the node",
            mode.as_str()
        ));
    }
    let stream = declarative.stream.unwrap_or(false);
    let gate_url = gate_base_url(agent, placement);
    let mut config = agent_config(
        model.model.clone(),
        agent.spec.description.clone().unwrap_or_default(),
        instruction,
        stream,
        &servers,
        remote_agents,
        |server| {
            let held = rules::may_hold(server, approval_rules);
            runtime_entry(server, mode, timings, &gate_url, held)
        },
    );
    config.memory = memory;
    config.context_config = context.as_ref().map(|c| c.config.clone());
    if let Some(template) = declarative
        .prompt_template
        .as_ref()
        .filter(|t| !t.data_sources.is_empty())
    {
        config.instruction = render_prompt(&object, agent, template, &config, refs)?;
    }
    let service_account = objects::gate_service_account_name(agent, placement);
    let session_api = SessionApi::of(&options.session_store_url, options.kagent_url.as_ref());
    let gate = mode.uses_gate().then(|| GateConfig {
        agent: AgentIdentity {
            kind: PolicyKind::Agent,
            namespace: namespace.clone(),
            name: agent.name_any(),
            uid: agent.uid().unwrap_or_default(),
            service_account: service_account.clone(),
        },
        callers: None,
        approval: GateApproval {
            mode,
            timeout_seconds: timings.timeout,
            wait_timeout_seconds: timings.wait_timeout,
            ttl_after_finished_seconds: timings.ttl_after_finished,
            grant_max_ttl_seconds: options.grant_max_ttl.map(|ttl| ttl.as_secs_f64()),
            max_open_requests,
            escalation: escalation.cloned(),
        },
        listen: match placement {
            GatePlacement::Sidecar => GATE_LISTEN,
            GatePlacement::Gateway => GATEWAY_LISTEN,
        }
        .to_owned(),
        metrics_listen: GATE_METRICS_LISTEN.to_owned(),
        servers: servers
            .iter()
            .map(|server| gate_server(server, approval_rules))
            .collect(),
    });
    let agent_card = agent_card(agent, stream);

    let mut secret_data = BTreeMap::new();
    secret_data.insert(AGENT_CONFIG_ITEM.to_owned(), serde_json::to_vec(&config)?);
    secret_data.insert(AGENT_CARD_ITEM.to_owned(), serde_json::to_vec(&agent_card)?);
    if let Some(gate) = &gate {
        secret_data.insert(GATE_CONFIG_ITEM.to_owned(), serde_json::to_vec(gate)?);
    }
    if let Some(hash) = context.and_then(|c| c.summarizer_key_hash) {
        model_hashes.push(hash);
    }
    let config_hash = config_hash(&secret_data, &model_hashes.concat());
    let objects = objects::build(&objects::ObjectInputs {
        agent,
        options,
        mode,
        placement,
        model: &model,
        skills: skills_pod.as_ref(),
        secret_data,
        config_hash: &config_hash,
        session_api: &session_api,
    });
    let agent_image = (objects.deployment.spec.as_ref())
        .and_then(|spec| spec.template.spec.as_ref())
        .and_then(|pod| {
            pod.containers
                .iter()
                .find(|c| c.name == objects::AGENT_CONTAINER)
        })
        .and_then(|container| container.image.as_deref());
    if let Some(warning) =
        agent_image.and_then(|image| runtime_version::model_warning(image, &config.model))
    {
        warnings.push(format!("{object}: {warning}"));
    }
    // Then whatever else the rendered pods hold (fail closed: nothing the operator renders
    // should reach the node next to a gate).
    let node_access = node_access::agent_pods(agent, &objects);
    if refuse_node_access {
        refuse_node_access_of(&object, mode, &node_access)?;
    }
    let isolation = gate.as_ref().and_then(|gate| {
        isolation::isolation(
            placement,
            &gate.servers,
            &objects,
            &objects::gate_name(agent),
            &options.cluster_cidrs,
            &session_api.token_volume(),
            &node_access,
        )
    });
    Ok(RenderedAgent {
        mode,
        placement,
        config,
        gate,
        config_hash,
        objects,
        warnings,
        isolation,
        session_api,
    })
}

/// Refuses an Agent (`object`) whose pods reach the node (`access`) next to the gate of
/// approval `mode`: the error names the first field, and the others after it.
fn refuse_node_access_of(
    object: &str,
    mode: ApprovalMode,
    access: &[node_access::NodeAccess],
) -> Result<()> {
    let Some((first, others)) = access.split_first() else {
        return Ok(());
    };
    let also = if others.is_empty() {
        String::new()
    } else {
        let fields: Vec<&str> = others.iter().map(|a| a.field.as_str()).collect();
        format!(" (also {})", fields.join(", "))
    };
    Err(Error::InvalidSpec {
        object: object.to_owned(),
        field: first.field.clone(),
        message: format!(
            "Forbidden: {}: the agent's pods could reach the node, where the kubelet keeps the approval gate's credentials, and go around the gate of approval mode {}{also}; remove it, or have the operator allow it with --allow-agent-node-access (the chart's allowAgentNodeAccess: the gate can then be bypassed)",
            first.why,
            mode.as_str()
        ),
    })
}

/// The Agent's gate placement: its own, else the operator's `default` (which does not apply
/// where no gate runs). Refuses an Agent's Gateway where no gate runs, and the labels reserved
/// for the gate pods (an Agent's Gateway, a ToolGate) on the agent pods (they would make them
/// gate endpoints).
fn gate_placement(
    object: &str,
    declarative: &DeclarativeAgentSpec,
    mode: ApprovalMode,
    default: GatePlacement,
) -> Result<GatePlacement> {
    let approval = declarative.approval.as_ref();
    let placement = match approval.and_then(|a| a.placement) {
        Some(own) => own,
        None if mode.uses_gate() => default,
        None => GatePlacement::Sidecar,
    };
    if placement == GatePlacement::Gateway && !mode.uses_gate() {
        let whose = if approval.and_then(|a| a.mode).is_some() {
            ""
        } else {
            " (the operator's default)"
        };
        return Err(Error::InvalidSpec {
            object: object.to_owned(),
            field: "spec.declarative.approval.placement".into(),
            message: format!(
                "Invalid value: \"Gateway\": approval mode {}{whose} runs no gate to place; use mode Gate or Both, or remove placement",
                mode.as_str()
            ),
        });
    }
    let reserved = [objects::GATE_POD_LABEL, objects::TOOL_GATE_LABEL]
        .into_iter()
        .find(|label| {
            declarative
                .deployment
                .as_ref()
                .is_some_and(|d| d.labels.contains_key(*label))
        });
    if let Some(label) = reserved {
        return Err(Error::InvalidSpec {
            object: object.to_owned(),
            field: "spec.declarative.deployment.labels".into(),
            message: format!("Forbidden: {label:?} is reserved for the approval gate's pods"),
        });
    }
    Ok(placement)
}

/// Where config.json points tool URLs in Gate and Both modes: the sidecar on loopback, or the
/// gate Service.
fn gate_base_url(agent: &Agent, placement: GatePlacement) -> String {
    match placement {
        GatePlacement::Sidecar => format!("http://{GATE_LISTEN}"),
        GatePlacement::Gateway => objects::GateOwner::agent(agent).gate_url(),
    }
}

/// SHA-256 (hex) of the Secret's content and the model Secrets' hashes.
fn config_hash(secret_data: &BTreeMap<String, Vec<u8>>, model_key_hash: &str) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in secret_data {
        hasher.update((key.len() as u64).to_be_bytes());
        hasher.update(key.as_bytes());
        hasher.update((value.len() as u64).to_be_bytes());
        hasher.update(value);
    }
    hasher.update(model_key_hash.as_bytes());
    hex::encode(hasher.finalize())
}

/// The system message run as a template over the `dataSources` ConfigMaps.
fn render_prompt(
    object: &str,
    agent: &Agent,
    template: &crate::api::agent::PromptTemplate,
    config: &AgentConfig,
    refs: &RefStore,
) -> Result<String> {
    let namespace = agent.namespace().unwrap_or_default();
    let mut fragments = BTreeMap::new();
    for (index, source) in template.data_sources.iter().enumerate() {
        let field = format!("spec.declarative.promptTemplate.dataSources[{index}]");
        let invalid = |field: String, message: String| Error::InvalidSpec {
            object: object.to_owned(),
            field,
            message,
        };
        if let Some(kind) = source
            .kind
            .as_deref()
            .filter(|k| !k.is_empty() && *k != "ConfigMap")
        {
            return Err(invalid(
                format!("{field}.kind"),
                format!("Unsupported value: {kind:?}: supported values: \"ConfigMap\""),
            ));
        }
        if let Some(group) = source.api_group.as_deref().filter(|g| !g.is_empty()) {
            return Err(invalid(
                format!("{field}.apiGroup"),
                format!("Unsupported value: {group:?}: supported values: \"\""),
            ));
        }
        let config_map =
            refs.config_map(&namespace, &source.name)
                .ok_or_else(|| Error::RefNotFound {
                    object: object.to_owned(),
                    field: field.clone(),
                    missing: format!("ConfigMap {namespace}/{}", source.name),
                })?;
        let prefix = source
            .alias
            .as_deref()
            .filter(|a| !a.is_empty())
            .unwrap_or(&source.name);
        for (key, value) in config_map.data.iter().flatten() {
            let path = format!("{prefix}/{key}");
            if fragments.insert(path.clone(), value.clone()).is_some() {
                return Err(invalid(
                    field.clone(),
                    format!(
                        "Duplicate value: {path:?}: another data source gives the same name; set an alias"
                    ),
                ));
            }
        }
    }
    let context = prompt::TemplateContext {
        agent_name: agent.name_any(),
        agent_namespace: namespace,
        description: agent.spec.description.clone().unwrap_or_default(),
        tool_names: config
            .http_tools
            .iter()
            .chain(&config.sse_tools)
            .flatten()
            .flat_map(|server| server.tools.iter().cloned())
            .collect(),
        skill_names: agent
            .spec
            .skills
            .as_deref()
            .map(skills::skill_names)
            .unwrap_or_default(),
    };
    let field = if agent
        .spec
        .declarative
        .as_ref()
        .is_some_and(|d| d.system_message_from.is_some() && d.system_message.is_none())
    {
        "spec.declarative.systemMessageFrom"
    } else {
        "spec.declarative.systemMessage"
    };
    prompt::render_template(&config.instruction, &fragments, &context).map_err(|message| {
        Error::InvalidSpec {
            object: object.to_owned(),
            field: field.to_owned(),
            message: format!("Invalid value: template: {message}"),
        }
    })
}

fn agent_config(
    model: serde_json::Value,
    description: String,
    instruction: String,
    stream: bool,
    servers: &[ResolvedServer],
    remote_agents: Vec<RemoteAgent>,
    entry_of: impl Fn(&ResolvedServer) -> McpToolServer,
) -> AgentConfig {
    let mut http_tools = Vec::new();
    let mut sse_tools = Vec::new();
    for server in servers {
        let entry = entry_of(server);
        match server.protocol {
            McpProtocol::StreamableHttp => http_tools.push(entry),
            McpProtocol::Sse => sse_tools.push(entry),
        }
    }
    AgentConfig {
        model,
        description,
        instruction,
        http_tools: (!http_tools.is_empty()).then_some(http_tools),
        sse_tools: (!sse_tools.is_empty()).then_some(sse_tools),
        remote_agents: (!remote_agents.is_empty()).then_some(remote_agents),
        execute_code: None,
        stream,
        memory: None,
        context_config: None,
    }
}

/// The config.json entry of one server: straight to the server in Runtime mode, through the
/// gate (no upstream headers, runtime confirmation only in Both mode) otherwise. `held`: the
/// gate may hold its calls for an approval.
fn runtime_entry(
    server: &ResolvedServer,
    mode: ApprovalMode,
    timings: ApprovalTimings,
    gate_url: &str,
    held: bool,
) -> McpToolServer {
    let require_approval = if mode.uses_runtime() {
        server.require_approval.clone()
    } else {
        Vec::new()
    };
    let params = if mode.uses_gate() {
        // The gate holds a gated call open up to waitTimeout: the runtime must not give up
        // first. An unset timeout means the runtime's short default, so it is set; an unset
        // SSE read timeout means a long default, so it is left alone.
        let floor = timings.wait_timeout + GATE_TIMEOUT_MARGIN;
        let at_least = |value: Option<f64>, raise_unset: bool| match value {
            Some(seconds) if held && seconds < floor => Some(floor),
            None if held && raise_unset => Some(floor),
            other => other,
        };
        McpParams {
            url: format!(
                "{gate_url}{}",
                GateServer::route_for(&server.namespace, &server.name)
            ),
            headers: BTreeMap::new(),
            timeout: at_least(server.timeout, true).map(seconds_number),
            sse_read_timeout: at_least(server.sse_read_timeout, false).map(seconds_number),
            terminate_on_close: server.terminate_on_close,
        }
    } else {
        upstream_params(server)
    };
    McpToolServer {
        params,
        tools: server.tools.clone(),
        allowed_headers: server.allowed_headers.clone(),
        require_approval,
    }
}

fn upstream_params(server: &ResolvedServer) -> McpParams {
    McpParams {
        url: server.url.clone(),
        headers: server.headers.clone(),
        timeout: server.timeout.map(seconds_number),
        sse_read_timeout: server.sse_read_timeout.map(seconds_number),
        terminate_on_close: server.terminate_on_close,
    }
}

fn gate_server(server: &ResolvedServer, approval_rules: &[ApprovalRule]) -> GateServer {
    GateServer {
        namespace: server.namespace.clone(),
        name: server.name.clone(),
        kind: server.kind,
        protocol: server.protocol,
        route: GateServer::route_for(&server.namespace, &server.name),
        params: upstream_params(server),
        tools: server.tools.clone(),
        require_approval: server.require_approval.clone(),
        allowed_headers: server.allowed_headers.clone(),
        rules: rules::gate_rules(server, approval_rules),
        trust_tool_annotations: server.trust_tool_annotations,
        accepted_tools: server.accepted_tools.clone(),
    }
}

/// The A2A agent card the runtime serves (`agent-card.json`).
fn agent_card(agent: &Agent, stream: bool) -> serde_json::Value {
    let namespace = agent.namespace().unwrap_or_default();
    let name = agent.name_any();
    let description = agent
        .spec
        .description
        .clone()
        .or_else(|| {
            agent
                .spec
                .declarative
                .as_ref()
                .and_then(|d| d.description.clone())
        })
        .unwrap_or_default();
    json!({
        "name": name,
        "description": description,
        "url": format!("http://{name}.{namespace}:{}", objects::AGENT_PORT),
        "version": "",
        "capabilities": {"streaming": stream, "pushNotifications": false, "stateTransitionHistory": true},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": agent
            .spec
            .declarative
            .as_ref()
            .and_then(|d| d.a2a_config.as_ref())
            .map(|a2a| json!(a2a.skills))
            .unwrap_or_else(|| json!([]))
    })
}
