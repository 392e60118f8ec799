//! What the gate does with a `tools/call`, before anything is forwarded or asked: refuse a
//! tool that is not offered, then apply the Agent's approval rules, then `requireApproval`.
//!
//! Precedence (docs/policies.md): a tool not in `toolNames` is refused before any rule; of
//! the rules about the call's tool on this server whose `when` holds, any Deny refuses the
//! call, else any RequireApproval asks (the most approvals any of them requires), else any
//! Allow forwards it; with no matching rule, `requireApproval` decides. A `when` that cannot
//! be evaluated matches as RequireApproval, whatever the rule's action. Tools without rules
//! cost one lookup and no CEL.

use std::collections::{HashMap, HashSet};

use crate::api::agent::{RuleAction, RuleEdits};
use crate::api::approval_request::MAX_APPROVALS;
use crate::condition::{Activation, CallFacts, Condition, MAX_INPUT_BYTES};
use crate::contract::gate_config::{AgentIdentity, GateRule, GateServer};
use crate::tool_risk::ToolFacts;
use serde_json::Value;

/// The decision for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyVerdict {
    /// The tool is not in the server's `toolNames`: refused.
    NotOffered,
    /// A Deny rule matched: refused without asking.
    Deny {
        /// The rule.
        rule: String,
    },
    /// The call waits for an approval.
    RequireApproval {
        /// The rule that asked; `None` when `requireApproval` did.
        rule: Option<String>,
        /// Distinct approvals needed.
        required_approvals: u32,
        /// Why the asking rule's `when` could not be evaluated, if that is why it asked.
        unevaluated: Option<String>,
    },
    /// The call is forwarded without approval.
    Forward {
        /// The Allow rule that let it through; `None` when no rule matched.
        rule: Option<String>,
    },
}

/// A call as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct PolicyCall<'a> {
    /// The tool.
    pub tool: &'a str,
    /// Its arguments (`{}` when absent) as a tree, when a rule's condition may read them
    /// ([`ServerPolicy::reads_arguments`]); `null` otherwise (nothing reads them then).
    pub args: &'a Value,
    /// Size in bytes of the call's message as the gate read it (bounds CEL's input).
    pub message_bytes: usize,
    /// The MCP session id, when known.
    pub session: Option<&'a str>,
    /// The tool's annotations as listed ([`ToolFacts::unlisted`] when no rule about the tool
    /// reads them: [`ServerPolicy::reads_annotations`]). Allow rules see them only when the
    /// server is trusted ([`ToolFacts::for_allowing`]).
    pub annotations: ToolFacts,
}

/// A rule ready to apply.
#[derive(Debug)]
struct CompiledRule {
    name: String,
    action: RuleAction,
    required_approvals: u32,
    when: Option<Condition>,
    edits: Option<RuleEdits>,
}

/// The policy of one tool server of the Agent, compiled once when the gate starts.
#[derive(Debug)]
pub struct ServerPolicy {
    agent: String,
    namespace: String,
    server: String,
    offered: HashSet<String>,
    gated: HashSet<String>,
    /// Rules by tool, in the Agent's order; tools without rules have no entry.
    rules: HashMap<String, Vec<CompiledRule>>,
}

impl ServerPolicy {
    /// Compiles the rules of `server`; the error names the rule that cannot be applied.
    pub fn compile(agent: &AgentIdentity, server: &GateServer) -> Result<Self, String> {
        let mut rules: HashMap<String, Vec<CompiledRule>> = HashMap::new();
        for rule in &server.rules {
            let compiled =
                compile_rule(rule).map_err(|why| format!("rule {:?}: {why}", rule.name))?;
            rules.entry(rule.tool.clone()).or_default().push(compiled);
        }
        Ok(Self {
            agent: agent.name.clone(),
            namespace: agent.namespace.clone(),
            server: server.name.clone(),
            offered: server.tools.iter().cloned().collect(),
            gated: server.require_approval.iter().cloned().collect(),
            rules,
        })
    }

    /// Whether `tool` may be listed and called at all.
    pub fn offers(&self, tool: &str) -> bool {
        self.offered.contains(tool)
    }

    /// Whether the approval policy governs `tool`: it is in `requireApproval` or a rule names
    /// it. An Agent's freeze stops the calls of these tools.
    pub fn governs(&self, tool: &str) -> bool {
        self.gated.contains(tool) || self.rules.contains_key(tool)
    }

    /// Whether deciding a call of `tool` may read its arguments: a rule about it has a
    /// condition, and the call's message is small enough for conditions to see them
    /// ([`MAX_INPUT_BYTES`]). Otherwise [`PolicyCall::args`] may be `null`.
    pub fn reads_arguments(&self, tool: &str, message_bytes: usize) -> bool {
        message_bytes <= MAX_INPUT_BYTES
            && self
                .rules
                .get(tool)
                .is_some_and(|rules| rules.iter().any(|rule| rule.when.is_some()))
    }

    /// Whether deciding a call of `tool` reads the tool's annotations: a rule about it has a
    /// condition that uses `annotations`. Otherwise [`PolicyCall::annotations`] is not read.
    pub fn reads_annotations(&self, tool: &str) -> bool {
        self.rules.get(tool).is_some_and(|rules| {
            rules
                .iter()
                .any(|rule| rule.when.as_ref().is_some_and(Condition::reads_annotations))
        })
    }

    /// What to do with `call`. Allow rules see the annotations as [`ToolFacts::for_allowing`]
    /// says; Deny and RequireApproval rules hold when they hold for the hints as the server
    /// asserted them or as [`ToolFacts::for_allowing`] says, so an untrusted server's hints can
    /// make a call need more, never less.
    pub fn decide(&self, call: &PolicyCall) -> PolicyVerdict {
        if !self.offers(call.tool) {
            return PolicyVerdict::NotOffered;
        }
        let Some(rules) = self.rules.get(call.tool) else {
            return self.by_default(call.tool);
        };
        let allowing_call = PolicyCall {
            annotations: call.annotations.for_allowing(),
            ..*call
        };
        let separate = allowing_call.annotations != call.annotations;
        let mut activation = None;
        let mut allowing_activation = None;
        let mut asking: Option<(&CompiledRule, Option<String>)> = None;
        let mut allowing = None;
        for rule in rules {
            let holds = match &rule.when {
                None => Ok(true),
                Some(condition) if separate && rule.action == RuleAction::Allow => condition
                    .evaluate(
                        allowing_activation
                            .get_or_insert_with(|| Activation::new(&self.facts(&allowing_call))),
                    ),
                Some(condition) => {
                    let asserted = condition.evaluate(
                        activation.get_or_insert_with(|| Activation::new(&self.facts(call))),
                    );
                    if separate {
                        // Untrusted hints only raise: a Deny or RequireApproval rule holds when
                        // it holds for the hints as asserted or for MCP's defaults.
                        let cautious =
                            condition.evaluate(allowing_activation.get_or_insert_with(|| {
                                Activation::new(&self.facts(&allowing_call))
                            }));
                        either_holds(asserted, cautious)
                    } else {
                        asserted
                    }
                }
            };
            match (holds, rule.action) {
                (Ok(false), _) => {}
                (Ok(true), RuleAction::Deny) => {
                    return PolicyVerdict::Deny {
                        rule: rule.name.clone(),
                    };
                }
                (Ok(true), RuleAction::Allow) => {
                    allowing.get_or_insert(rule);
                }
                (Ok(true), RuleAction::RequireApproval) => ask(&mut asking, rule, None),
                (Err(why), _) => ask(&mut asking, rule, Some(why)),
            }
        }
        match (asking, allowing) {
            (Some((rule, unevaluated)), _) => PolicyVerdict::RequireApproval {
                rule: Some(rule.name.clone()),
                required_approvals: rule.required_approvals,
                unevaluated,
            },
            (None, Some(rule)) => PolicyVerdict::Forward {
                rule: Some(rule.name.clone()),
            },
            (None, None) => self.by_default(call.tool),
        }
    }

    /// `requireApproval` alone decides.
    fn by_default(&self, tool: &str) -> PolicyVerdict {
        if self.gated.contains(tool) {
            PolicyVerdict::RequireApproval {
                rule: None,
                required_approvals: 1,
                unevaluated: None,
            }
        } else {
            PolicyVerdict::Forward { rule: None }
        }
    }

    /// The `edits` of the rule named `rule` about `tool`: `None` when the gate has no such rule,
    /// `Some(None)` when the rule sets none (approvers may edit anything).
    pub fn rule_edits(&self, tool: &str, rule: &str) -> Option<Option<&RuleEdits>> {
        self.rules
            .get(tool)?
            .iter()
            .find(|r| r.name == rule)
            .map(|r| r.edits.as_ref())
    }

    /// What conditions (of rules and of grants) see of `call`.
    pub fn facts<'a>(&'a self, call: &PolicyCall<'a>) -> CallFacts<'a> {
        CallFacts {
            args: call.args,
            args_bytes: call.message_bytes,
            agent: &self.agent,
            namespace: &self.namespace,
            server: &self.server,
            tool: call.tool,
            session: call.session,
            annotations: call.annotations,
        }
    }
}

/// A condition evaluated twice holds when either evaluation holds; otherwise it fails when
/// either failed (failing asks for approval).
fn either_holds(first: Result<bool, String>, second: Result<bool, String>) -> Result<bool, String> {
    match (first, second) {
        (Ok(true), _) | (_, Ok(true)) => Ok(true),
        (Err(why), _) | (_, Err(why)) => Err(why),
        _ => Ok(false),
    }
}

/// Keeps the first asking rule, or a later one that needs more approvals: the verdict names
/// the first rule (in the Agent's order) asking for the most approvals.
fn ask<'a>(
    asking: &mut Option<(&'a CompiledRule, Option<String>)>,
    rule: &'a CompiledRule,
    unevaluated: Option<String>,
) {
    if asking
        .as_ref()
        .is_none_or(|(first, _)| rule.required_approvals > first.required_approvals)
    {
        *asking = Some((rule, unevaluated));
    }
}

fn compile_rule(rule: &GateRule) -> Result<CompiledRule, String> {
    if !(1..=MAX_APPROVALS).contains(&rule.required_approvals) {
        return Err(format!(
            "requiredApprovals {}: must be between 1 and {MAX_APPROVALS}",
            rule.required_approvals
        ));
    }
    let when = rule
        .when
        .as_deref()
        .map(Condition::compile)
        .transpose()
        .map_err(|why| format!("when: {why}"))?;
    Ok(CompiledRule {
        name: rule.name.clone(),
        action: rule.action,
        required_approvals: rule.required_approvals,
        when,
        edits: rule.edits.clone(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::api::agent::ToolServerKind;
    use crate::api::remote_mcp_server::McpProtocol;
    use crate::contract::agent_config::McpParams;

    fn rule(name: &str, tool: &str, when: Option<&str>, action: RuleAction) -> GateRule {
        GateRule {
            name: name.into(),
            tool: tool.into(),
            when: when.map(str::to_owned),
            action,
            required_approvals: 1,
            edits: None,
            escalation: None,
        }
    }

    fn policy(gated: &[&str], rules: Vec<GateRule>) -> ServerPolicy {
        let server = GateServer {
            namespace: "tools".into(),
            name: "fs".into(),
            kind: ToolServerKind::RemoteMCPServer,
            protocol: McpProtocol::StreamableHttp,
            route: GateServer::route_for("tools", "fs"),
            params: McpParams {
                url: "http://fs/mcp".into(),
                headers: Default::default(),
                timeout: None,
                sse_read_timeout: None,
                terminate_on_close: None,
            },
            tools: ["read_file", "write_file", "delete_file", "transfer_funds"]
                .map(String::from)
                .to_vec(),
            require_approval: gated.iter().map(|t| t.to_string()).collect(),
            allowed_headers: Vec::new(),
            rules,
            trust_tool_annotations: false,
            accepted_tools: Default::default(),
        };
        let agent = AgentIdentity {
            kind: Default::default(),
            namespace: "team-a".into(),
            name: "files".into(),
            uid: String::new(),
            service_account: "files".into(),
        };
        ServerPolicy::compile(&agent, &server).unwrap()
    }

    fn decide(policy: &ServerPolicy, tool: &str, args: serde_json::Value) -> PolicyVerdict {
        let message_bytes = args.to_string().len();
        policy.decide(&PolicyCall {
            tool,
            args: &args,
            message_bytes,
            session: None,
            annotations: ToolFacts::unlisted(false),
        })
    }

    fn asks(rule: Option<&str>) -> PolicyVerdict {
        PolicyVerdict::RequireApproval {
            rule: rule.map(str::to_owned),
            required_approvals: 1,
            unevaluated: None,
        }
    }

    fn forwards(rule: Option<&str>) -> PolicyVerdict {
        PolicyVerdict::Forward {
            rule: rule.map(str::to_owned),
        }
    }

    /// `decide` for a call of `tool` whose server asserts `hints`, `trusted` or not.
    fn decide_hinted(
        policy: &ServerPolicy,
        tool: &str,
        hints: serde_json::Value,
        trusted: bool,
    ) -> PolicyVerdict {
        let listed = crate::tool_risk::listed(
            json!({"name": tool, "annotations": hints})
                .as_object()
                .unwrap(),
            trusted,
        )
        .unwrap();
        policy.decide(&PolicyCall {
            tool,
            args: &json!({}),
            message_bytes: 2,
            session: None,
            annotations: ToolFacts::of(Some(&listed), trusted),
        })
    }

    #[test]
    fn a_read_only_hint_allows_without_approval_only_when_trusted() {
        let p = policy(
            &["read_file"],
            vec![rule(
                "read-only-is-fine",
                "read_file",
                Some("annotations.readOnlyHint"),
                RuleAction::Allow,
            )],
        );
        assert!(p.reads_annotations("read_file") && !p.reads_annotations("write_file"));
        let read_only = json!({"readOnlyHint": true});
        assert_eq!(
            decide_hinted(&p, "read_file", read_only.clone(), true),
            forwards(Some("read-only-is-fine"))
        );
        assert_eq!(
            decide_hinted(&p, "read_file", read_only, false),
            asks(None),
            "an untrusted readOnlyHint cannot let the call through"
        );
        // Nor can an untrusted server lift a destructive default by saying the opposite.
        let p = policy(
            &["read_file"],
            vec![rule(
                "harmless",
                "read_file",
                Some("!annotations.destructiveHint"),
                RuleAction::Allow,
            )],
        );
        assert_eq!(
            decide_hinted(&p, "read_file", json!({"destructiveHint": false}), false),
            asks(None)
        );
    }

    #[test]
    fn an_untrusted_destructive_hint_can_require_approval_or_deny() {
        let p = policy(
            &[],
            vec![
                rule(
                    "destructive-asks",
                    "write_file",
                    Some("annotations.destructiveHint && annotations.listed"),
                    RuleAction::RequireApproval,
                ),
                rule(
                    "open-world-denied",
                    "delete_file",
                    Some("annotations.openWorldHint && annotations.listed"),
                    RuleAction::Deny,
                ),
            ],
        );
        for trusted in [false, true] {
            assert_eq!(
                decide_hinted(&p, "write_file", json!({"destructiveHint": true}), trusted),
                asks(Some("destructive-asks"))
            );
            assert_eq!(
                decide_hinted(&p, "write_file", json!({"destructiveHint": false}), trusted),
                if trusted {
                    forwards(None)
                } else {
                    asks(Some("destructive-asks"))
                },
                "an untrusted server cannot lift a rule by asserting a harmless hint"
            );
            if !trusted {
                assert_eq!(
                    decide_hinted(&p, "delete_file", json!({"openWorldHint": false}), trusted),
                    PolicyVerdict::Deny {
                        rule: "open-world-denied".into()
                    },
                    "nor escape a Deny rule that way"
                );
            }
            assert_eq!(
                decide_hinted(&p, "delete_file", json!({}), trusted),
                PolicyVerdict::Deny {
                    rule: "open-world-denied".into()
                },
                "the MCP default openWorldHint true holds for a hint left out"
            );
        }
        // A tool no list showed: the defaults, not listed.
        assert_eq!(decide(&p, "write_file", json!({})), forwards(None));
    }

    #[test]
    fn without_rules_require_approval_decides() {
        let p = policy(&["delete_file"], Vec::new());
        assert_eq!(decide(&p, "delete_file", json!({})), asks(None));
        assert_eq!(decide(&p, "read_file", json!({})), forwards(None));
        assert_eq!(decide(&p, "exec", json!({})), PolicyVerdict::NotOffered);
    }

    #[test]
    fn an_allow_never_opens_a_tool_that_is_not_offered() {
        let p = policy(&[], vec![rule("open", "exec", None, RuleAction::Allow)]);
        assert_eq!(decide(&p, "exec", json!({})), PolicyVerdict::NotOffered);
    }

    #[test]
    fn the_read_only_paths_example() {
        let p = policy(
            &["write_file", "delete_file"],
            vec![
                rule("reads", "read_file", None, RuleAction::Allow),
                rule(
                    "no-etc",
                    "delete_file",
                    Some("args.path.startsWith('/etc/')"),
                    RuleAction::Deny,
                ),
                rule(
                    "scratch",
                    "write_file",
                    Some("args.path.startsWith('/tmp/')"),
                    RuleAction::Allow,
                ),
            ],
        );
        assert_eq!(
            decide(&p, "delete_file", json!({"path": "/etc/passwd"})),
            PolicyVerdict::Deny {
                rule: "no-etc".into()
            }
        );
        assert_eq!(
            decide(&p, "delete_file", json!({"path": "/data/x"})),
            asks(None)
        );
        assert_eq!(
            decide(&p, "write_file", json!({"path": "/tmp/x"})),
            forwards(Some("scratch"))
        );
        assert_eq!(
            decide(&p, "write_file", json!({"path": "/data/x"})),
            asks(None)
        );
        assert_eq!(
            decide(&p, "read_file", json!({"path": "/etc/passwd"})),
            forwards(Some("reads"))
        );
    }

    #[test]
    fn a_threshold_asks_only_above_it() {
        let p = policy(
            &["transfer_funds"],
            vec![
                rule(
                    "big-transfers",
                    "transfer_funds",
                    Some("args.amount > 1000"),
                    RuleAction::RequireApproval,
                ),
                rule("small-transfers", "transfer_funds", None, RuleAction::Allow),
            ],
        );
        assert_eq!(
            decide(&p, "transfer_funds", json!({"amount": 1500})),
            asks(Some("big-transfers"))
        );
        assert_eq!(
            decide(&p, "transfer_funds", json!({"amount": 20})),
            forwards(Some("small-transfers"))
        );
    }

    #[test]
    fn a_condition_that_cannot_be_evaluated_asks_whatever_the_action() {
        for action in [
            RuleAction::Allow,
            RuleAction::Deny,
            RuleAction::RequireApproval,
        ] {
            let p = policy(
                &[],
                vec![rule("r", "write_file", Some("args.size > 10"), action)],
            );
            match decide(&p, "write_file", json!({"path": "/tmp/x"})) {
                PolicyVerdict::RequireApproval {
                    rule, unevaluated, ..
                } => {
                    assert_eq!(rule.as_deref(), Some("r"));
                    assert!(unevaluated.unwrap().contains("size"));
                }
                other => panic!("{action:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_matching_deny_beats_an_unevaluable_condition_and_an_allow() {
        let p = policy(
            &[],
            vec![
                rule("broken", "write_file", Some("args.nope"), RuleAction::Allow),
                rule("ok", "write_file", None, RuleAction::Allow),
                rule("never", "write_file", None, RuleAction::Deny),
            ],
        );
        assert_eq!(
            decide(&p, "write_file", json!({})),
            PolicyVerdict::Deny {
                rule: "never".into()
            }
        );
    }

    #[test]
    fn rules_of_other_tools_do_not_apply() {
        let p = policy(
            &["delete_file"],
            vec![rule("w", "write_file", None, RuleAction::Deny)],
        );
        assert_eq!(decide(&p, "delete_file", json!({})), asks(None));
    }

    #[test]
    fn a_rule_that_does_not_compile_or_asks_for_no_approvals_stops_the_gate() {
        let agent = AgentIdentity {
            kind: Default::default(),
            namespace: "n".into(),
            name: "a".into(),
            uid: String::new(),
            service_account: "a".into(),
        };
        let base = GateServer {
            namespace: "n".into(),
            name: "fs".into(),
            kind: ToolServerKind::RemoteMCPServer,
            protocol: McpProtocol::StreamableHttp,
            route: "/x".into(),
            params: McpParams {
                url: "http://fs/mcp".into(),
                headers: Default::default(),
                timeout: None,
                sse_read_timeout: None,
                terminate_on_close: None,
            },
            tools: vec!["t".into()],
            require_approval: Vec::new(),
            allowed_headers: Vec::new(),
            rules: vec![rule("bad", "t", Some("args.x >"), RuleAction::Allow)],
            trust_tool_annotations: false,
            accepted_tools: Default::default(),
        };
        let why = ServerPolicy::compile(&agent, &base).unwrap_err();
        assert!(why.starts_with("rule \"bad\": when: CEL: "), "{why}");
        for required in [0, MAX_APPROVALS + 1] {
            let mut odd = base.clone();
            odd.rules = vec![GateRule {
                required_approvals: required,
                ..rule("odd", "t", None, RuleAction::RequireApproval)
            }];
            let why = ServerPolicy::compile(&agent, &odd).unwrap_err();
            assert_eq!(
                why,
                format!("rule \"odd\": requiredApprovals {required}: must be between 1 and 16")
            );
        }
    }

    #[test]
    fn a_rules_edits_are_found_by_tool_and_name() {
        let frozen = RuleEdits {
            allowed: Some(false),
            paths: None,
        };
        let p = policy(
            &[],
            vec![
                GateRule {
                    edits: Some(frozen.clone()),
                    ..rule("frozen", "delete_file", None, RuleAction::RequireApproval)
                },
                rule("open", "delete_file", None, RuleAction::RequireApproval),
            ],
        );
        assert_eq!(p.rule_edits("delete_file", "frozen"), Some(Some(&frozen)));
        assert_eq!(p.rule_edits("delete_file", "open"), Some(None));
        assert_eq!(p.rule_edits("delete_file", "gone"), None);
        assert_eq!(
            p.rule_edits("write_file", "frozen"),
            None,
            "another tool's rule"
        );
    }

    #[test]
    fn a_quorum_rule_asks_for_its_approvals_and_the_most_demanding_rule_wins() {
        let quorum = |name: &str, when: Option<&str>, n: u32| GateRule {
            required_approvals: n,
            ..rule(name, "transfer_funds", when, RuleAction::RequireApproval)
        };
        let p = policy(
            &["transfer_funds"],
            vec![
                quorum("big", Some("args.amount > 1000"), 2),
                quorum("huge", Some("args.amount > 100000"), 3),
                quorum("any", None, 1),
            ],
        );
        let asks_for = |amount: i64| match decide(&p, "transfer_funds", json!({"amount": amount})) {
            PolicyVerdict::RequireApproval {
                rule,
                required_approvals,
                ..
            } => (rule.unwrap(), required_approvals),
            other => panic!("{other:?}"),
        };
        assert_eq!(asks_for(10), ("any".into(), 1));
        assert_eq!(asks_for(5000), ("big".into(), 2));
        assert_eq!(asks_for(500_000), ("huge".into(), 3));
        // Conditions that cannot be evaluated ask with their rules' counts too.
        assert_eq!(asks_for_missing(&p), ("huge".into(), 3));
    }

    fn asks_for_missing(p: &ServerPolicy) -> (String, u32) {
        match decide(p, "transfer_funds", json!({})) {
            PolicyVerdict::RequireApproval {
                rule,
                required_approvals,
                unevaluated: Some(_),
            } => (rule.unwrap(), required_approvals),
            other => panic!("{other:?}"),
        }
    }

    /// One rule of the property test: its action and whether its `when` holds, fails, or is
    /// absent.
    #[derive(Clone, Debug)]
    struct Case {
        action: RuleAction,
        when: Option<Result<bool, ()>>,
    }

    fn case() -> impl Strategy<Value = Case> {
        let action = prop_oneof![
            Just(RuleAction::Deny),
            Just(RuleAction::RequireApproval),
            Just(RuleAction::Allow)
        ];
        let when = prop_oneof![
            Just(None),
            Just(Some(Ok(true))),
            Just(Some(Ok(false))),
            Just(Some(Err(())))
        ];
        (action, when).prop_map(|(action, when)| Case { action, when })
    }

    proptest! {
        /// Deny beats RequireApproval (an unevaluable condition included) beats Allow beats
        /// requireApproval, whatever the order of the rules.
        #[test]
        fn precedence_holds_in_any_order(cases in prop::collection::vec(case(), 0..8), listed in any::<bool>()) {
            let rules = cases
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let when = c.when.map(|w| match w {
                        Ok(true) => "args.n == 1",
                        Ok(false) => "args.n == 2",
                        Err(()) => "args.missing == 1",
                    });
                    rule(&format!("r{i}"), "write_file", when, c.action)
                })
                .collect();
            let gated: &[&str] = if listed { &["write_file"] } else { &[] };
            let p = policy(gated, rules);
            let verdict = decide(&p, "write_file", json!({"n": 1}));
            let matching = |wanted: RuleAction| {
                cases.iter().position(|c| c.action == wanted && matches!(c.when, None | Some(Ok(true))))
            };
            let asking = cases.iter().position(|c| {
                matches!(c.when, Some(Err(()))) || (c.action == RuleAction::RequireApproval && matches!(c.when, None | Some(Ok(true))))
            });
            let expected = if let Some(i) = matching(RuleAction::Deny) {
                PolicyVerdict::Deny { rule: format!("r{i}") }
            } else if let Some(i) = asking {
                let unevaluated = matches!(cases[i].when, Some(Err(())));
                match verdict.clone() {
                    PolicyVerdict::RequireApproval { rule, unevaluated: why, .. } => {
                        prop_assert_eq!(why.is_some(), unevaluated);
                        prop_assert_eq!(rule, Some(format!("r{i}")));
                    }
                    other => prop_assert!(false, "expected an approval, got {:?}", other),
                }
                verdict.clone()
            } else if let Some(i) = matching(RuleAction::Allow) {
                forwards(Some(&format!("r{i}")))
            } else if listed {
                asks(None)
            } else {
                forwards(None)
            };
            prop_assert_eq!(verdict, expected);
        }
    }
}
