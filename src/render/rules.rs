//! The Agent's approval rules (`spec.declarative.approval.rules`): checked against its tools,
//! their conditions compiled, and handed to the gate per tool server (docs/policies.md).

use crate::api::ApprovalMode;
use crate::api::agent::{ApprovalRule, RuleAction, Tool};
use crate::condition::Condition;
use crate::contract::gate_config::GateRule;
use crate::{Error, Result, edit};

use super::tools::ResolvedServer;

const FIELD: &str = "spec.declarative.approval.rules";

/// Checks `rules`: only where a gate enforces them (`mode`, `mode_is_default` when it is the
/// operator's default), each `server` names one of the Agent's tool servers, each `tool` is in
/// that server's toolNames (any server's without `server`), each `when` compiles within
/// its bounds, and each `edits.paths` entry is a JSON pointer. The error names the rule's field
/// and, for `when`, the CEL error.
pub fn check_rules(
    object: &str,
    rules: &[ApprovalRule],
    tools: &[Tool],
    mode: ApprovalMode,
    mode_is_default: bool,
) -> Result<()> {
    let invalid = |field: String, message: String| Error::InvalidSpec {
        object: object.to_owned(),
        field,
        message,
    };
    if rules.is_empty() {
        return Ok(());
    }
    if !mode.uses_gate() {
        let whose = if mode_is_default {
            " (the operator's default)"
        } else {
            ""
        };
        return Err(invalid(
            FIELD.into(),
            format!(
                "Forbidden: approval rules are enforced by the gate, and approval mode {}{whose} runs none; use mode Gate or Both, or remove the rules",
                mode.as_str()
            ),
        ));
    }
    let servers: Vec<_> = tools.iter().filter_map(|t| t.mcp_server.as_ref()).collect();
    for (index, rule) in rules.iter().enumerate() {
        let field = format!("{FIELD}[{index}]");
        let candidates: Vec<_> = match &rule.server {
            Some(name) => {
                let named: Vec<_> = servers.iter().filter(|s| &s.name == name).collect();
                if named.is_empty() {
                    return Err(invalid(
                        format!("{field}.server"),
                        format!(
                            "Invalid value: {name:?}: no tool server in spec.declarative.tools has this name"
                        ),
                    ));
                }
                named
            }
            None => servers.iter().collect(),
        };
        if !candidates.iter().any(|s| s.tool_names.contains(&rule.tool)) {
            let whose = match &rule.server {
                Some(name) => format!("the toolNames of server {name:?}"),
                None => "the toolNames of a tool server".into(),
            };
            return Err(invalid(
                format!("{field}.tool"),
                format!("Invalid value: {:?}: must appear in {whose}", rule.tool),
            ));
        }
        check_when(object, &field, rule)?;
        check_edits(object, &field, rule)?;
    }
    Ok(())
}

/// Checks the rules of a ToolGate (`spec.approval.rules`): each `server`, when set, is the
/// ToolGate's `server`, each `tool` is in its `tools`, each `when` compiles, and each
/// `edits.paths` entry is a JSON pointer.
pub fn check_tool_gate_rules(
    object: &str,
    rules: &[ApprovalRule],
    server: &str,
    tools: &[String],
) -> Result<()> {
    for (index, rule) in rules.iter().enumerate() {
        let field = format!("spec.approval.rules[{index}]");
        let invalid = |field: String, message: String| Error::InvalidSpec {
            object: object.to_owned(),
            field,
            message,
        };
        if let Some(name) = rule.server.as_ref().filter(|name| *name != server) {
            return Err(invalid(
                format!("{field}.server"),
                format!(
                    "Invalid value: {name:?}: must be unset or the ToolGate's server {server:?}"
                ),
            ));
        }
        if !tools.contains(&rule.tool) {
            return Err(invalid(
                format!("{field}.tool"),
                format!(
                    "Invalid value: {:?}: must appear in spec.toolNames",
                    rule.tool
                ),
            ));
        }
        check_when(object, &field, rule)?;
        check_edits(object, &field, rule)?;
    }
    Ok(())
}

/// Checks each rule's `escalation` (rules at `field`, e.g. `spec.approval.rules`): only on a
/// RequireApproval rule, and, as the approval's own, against the approval `timeout` (seconds).
pub fn check_rule_escalations(
    object: &str,
    field: &str,
    rules: &[ApprovalRule],
    timeout: f64,
) -> Result<()> {
    for (index, rule) in rules.iter().enumerate() {
        let Some(escalation) = rule.escalation.as_deref() else {
            continue;
        };
        let field = format!("{field}[{index}].escalation");
        let invalid = |field: String, message: String| Error::InvalidSpec {
            object: object.to_owned(),
            field,
            message,
        };
        if rule.action != RuleAction::RequireApproval {
            return Err(invalid(
                field,
                format!(
                    "Forbidden: only a RequireApproval rule makes requests to escalate; rule {:?} is {:?}",
                    rule.name, rule.action
                ),
            ));
        }
        escalation
            .check(timeout)
            .map_err(|(part, message)| invalid(format!("{field}.{part}"), message))?;
    }
    Ok(())
}

/// Compiles the rule's `when` (at `field`), within its bounds; the error names the CEL error.
fn check_when(object: &str, field: &str, rule: &ApprovalRule) -> Result<()> {
    let Some(when) = &rule.when else {
        return Ok(());
    };
    Condition::compile(when)
        .map(drop)
        .map_err(|why| Error::InvalidSpec {
            object: object.to_owned(),
            field: format!("{field}.when"),
            message: format!("Invalid value: {when:?}: {why}"),
        })
}

/// Checks that each of the rule's `edits.paths` (at `field`) is a JSON pointer (RFC 6901):
/// `~` only as `~0` or `~1`. The CRD schema bounds their number, length and leading `/`.
fn check_edits(object: &str, field: &str, rule: &ApprovalRule) -> Result<()> {
    let paths = rule.edits.iter().flat_map(|e| e.paths.iter().flatten());
    for (index, path) in paths.enumerate() {
        if let Err(why) = edit::check_pointer(path) {
            return Err(Error::InvalidSpec {
                object: object.to_owned(),
                field: format!("{field}.edits.paths[{index}]"),
                message: format!("Invalid value: {path:?}: {why}"),
            });
        }
    }
    Ok(())
}

/// The rules that apply to `server`'s calls, in the Agent's order, as gate.json carries them.
pub fn gate_rules(server: &ResolvedServer, rules: &[ApprovalRule]) -> Vec<GateRule> {
    rules
        .iter()
        .filter(|rule| rule.server.as_ref().is_none_or(|name| *name == server.name))
        .filter(|rule| server.tools.contains(&rule.tool))
        .map(|rule| GateRule {
            name: rule.name.clone(),
            tool: rule.tool.clone(),
            when: rule.when.clone(),
            action: rule.action,
            required_approvals: rule
                .required_approvals
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(1),
            edits: rule.edits.clone(),
            escalation: rule.escalation.as_deref().cloned(),
        })
        .collect()
}

/// Whether the gate may hold calls to `server` for an approval: a tool requires one, or a rule
/// about one of its tools may ask.
pub fn may_hold(server: &ResolvedServer, rules: &[ApprovalRule]) -> bool {
    !server.require_approval.is_empty() || gate_rules(server, rules).iter().any(GateRule::may_ask)
}
