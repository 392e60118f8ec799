//! `spec.declarative.promptTemplate`: the system message as a template, the way kagent
//! renders it (Go `text/template` syntax), with the subset it is used with:
//!
//! - `{{include "source/key"}}` (also `include("source/key")`): a key of a `dataSources`
//!   ConfigMap, by its alias or name; the text is inserted as is, not run as a template;
//! - `{{.AgentName}}`, `{{.AgentNamespace}}`, `{{.Description}}`, `{{.ToolNames}}`,
//!   `{{.SkillNames}}` (lists print as Go prints them, `[a b]`);
//! - `{{range .ToolNames}}...{{.}}...{{end}}` (also `.SkillNames`);
//! - comments `{{/* ... */}}` and the trim markers `{{-` and `-}}`.
//!
//! Anything else is refused, naming the field, rather than rendered differently from kagent.

use std::collections::BTreeMap;

/// The variables a template can use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TemplateContext {
    /// metadata.name of the Agent.
    pub agent_name: String,
    /// metadata.namespace of the Agent.
    pub agent_namespace: String,
    /// spec.description of the Agent.
    pub description: String,
    /// The tools of every MCP server of the agent, in order.
    pub tool_names: Vec<String>,
    /// The skill directory names of the agent.
    pub skill_names: Vec<String>,
}

#[derive(Debug, PartialEq)]
enum Node {
    Text(String),
    Include(String),
    Field(String),
    Dot,
    Range(String, Vec<Node>),
}

/// Splits `text` into text and actions, applying trim markers.
fn lex(text: &str) -> Result<Vec<(bool, String)>, String> {
    let mut items: Vec<(bool, String)> = Vec::new();
    let mut rest = text;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut before = &rest[..start];
        if trim_next {
            before = before.trim_start();
        }
        let after_open = &rest[start + 2..];
        let (trim_before, after_open) = match after_open.strip_prefix("- ") {
            Some(stripped) => (true, stripped),
            None => (false, after_open),
        };
        if trim_before {
            before = before.trim_end();
        }
        items.push((false, before.to_owned()));
        let end = after_open
            .find("}}")
            .ok_or("unclosed action: \"{{\" without \"}}\"")?;
        let mut action = &after_open[..end];
        trim_next = false;
        if let Some(stripped) = action.strip_suffix(" -") {
            action = stripped;
            trim_next = true;
        }
        items.push((true, action.trim().to_owned()));
        rest = &after_open[end + 2..];
    }
    let last = if trim_next { rest.trim_start() } else { rest };
    items.push((false, last.to_owned()));
    Ok(items)
}

const FIELDS: [&str; 5] = [
    "AgentName",
    "AgentNamespace",
    "Description",
    "ToolNames",
    "SkillNames",
];

fn field(action: &str) -> Option<String> {
    let name = action.strip_prefix('.')?;
    FIELDS.contains(&name).then(|| name.to_owned())
}

fn include_path(action: &str) -> Option<String> {
    let argument = action.strip_prefix("include")?.trim();
    let argument = argument
        .strip_prefix('(')
        .and_then(|a| a.strip_suffix(')'))
        .map(str::trim)
        .unwrap_or(argument);
    let path = argument.strip_prefix('"')?.strip_suffix('"')?;
    (!path.contains(['"', '\\'])).then(|| path.to_owned())
}

fn parse(
    items: &mut std::vec::IntoIter<(bool, String)>,
    in_range: bool,
) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    while let Some((is_action, text)) = items.next() {
        if !is_action {
            if !text.is_empty() {
                nodes.push(Node::Text(text));
            }
            continue;
        }
        if text.starts_with("/*") && text.ends_with("*/") {
            continue;
        }
        if text == "end" {
            return if in_range {
                Ok(nodes)
            } else {
                Err("unexpected {{end}}".into())
            };
        }
        if let Some(list) = text.strip_prefix("range ") {
            let list = list.trim();
            if !matches!(list, ".ToolNames" | ".SkillNames") {
                return Err(format!(
                    "unsupported range over {list:?} (use .ToolNames or .SkillNames)"
                ));
            }
            let body = parse(items, true)?;
            nodes.push(Node::Range(list[1..].to_owned(), body));
            continue;
        }
        if text == "." {
            nodes.push(Node::Dot);
        } else if let Some(path) = include_path(&text) {
            nodes.push(Node::Include(path));
        } else if let Some(name) = field(&text) {
            nodes.push(Node::Field(name));
        } else {
            return Err(format!("unsupported action {{{{{text}}}}}"));
        }
    }
    if in_range {
        Err("{{range}} without {{end}}".into())
    } else {
        Ok(nodes)
    }
}

fn list(context: &TemplateContext, name: &str) -> Vec<String> {
    match name {
        "ToolNames" => context.tool_names.clone(),
        _ => context.skill_names.clone(),
    }
}

fn execute(
    nodes: &[Node],
    context: &TemplateContext,
    fragments: &BTreeMap<String, String>,
    dot: Option<&str>,
    out: &mut String,
) -> Result<(), String> {
    for node in nodes {
        match node {
            Node::Text(text) => out.push_str(text),
            Node::Include(path) => match fragments.get(path) {
                Some(text) => out.push_str(text),
                None => {
                    let available: Vec<&str> = fragments.keys().map(String::as_str).collect();
                    return Err(format!(
                        "include {path:?}: no such fragment (available: {})",
                        available.join(", ")
                    ));
                }
            },
            Node::Field(name) => match name.as_str() {
                "AgentName" => out.push_str(&context.agent_name),
                "AgentNamespace" => out.push_str(&context.agent_namespace),
                "Description" => out.push_str(&context.description),
                other => {
                    out.push('[');
                    out.push_str(&list(context, other).join(" "));
                    out.push(']');
                }
            },
            Node::Dot => match dot {
                Some(item) => out.push_str(item),
                None => return Err("{{.}} outside {{range}}".into()),
            },
            Node::Range(name, body) => {
                for item in list(context, name) {
                    execute(body, context, fragments, Some(&item), out)?;
                }
            }
        }
    }
    Ok(())
}

/// Renders `template` with `fragments` (keyed `source/key`) and `context`. The error says
/// what is wrong, for the caller to put under the field.
pub fn render_template(
    template: &str,
    fragments: &BTreeMap<String, String>,
    context: &TemplateContext,
) -> Result<String, String> {
    let nodes = parse(&mut lex(template)?.into_iter(), false)?;
    let mut out = String::with_capacity(template.len());
    execute(&nodes, context, fragments, None, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> TemplateContext {
        TemplateContext {
            agent_name: "helper".into(),
            agent_namespace: "team".into(),
            description: "Helps".into(),
            tool_names: vec!["read_file".into(), "delete_file".into()],
            skill_names: vec![],
        }
    }

    fn fragments() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("rules/safety".to_owned(), "Never {{guess}}.".to_owned()),
            ("base/tone".to_owned(), "Be brief.".to_owned()),
        ])
    }

    #[test]
    fn includes_fragments_and_variables() {
        let out = render_template(
            "{{include \"rules/safety\"}} {{ include(\"base/tone\") }}\nYou are {{.AgentName}} in {{.AgentNamespace}}: {{.Description}}. Tools: {{.ToolNames}}{{/* note */}}",
            &fragments(),
            &context(),
        )
        .unwrap();
        assert_eq!(
            out,
            "Never {{guess}}. Be brief.\nYou are helper in team: Helps. Tools: [read_file delete_file]"
        );
    }

    #[test]
    fn ranges_and_trims() {
        let out = render_template(
            "Tools:\n{{- range .ToolNames }}\n- {{ . }}\n{{- end }}\nSkills: {{ .SkillNames }}",
            &fragments(),
            &context(),
        )
        .unwrap();
        assert_eq!(out, "Tools:\n- read_file\n- delete_file\nSkills: []");
    }

    #[test]
    fn refuses_what_it_does_not_render_like_kagent() {
        for (template, expected) in [
            ("{{include \"rules/nope\"}}", "no such fragment"),
            ("{{ if .AgentName }}x{{ end }}", "unsupported action"),
            ("{{ .Secret }}", "unsupported action"),
            ("{{ range .ToolNames }}x", "without {{end}}"),
            ("{{ end }}", "unexpected"),
            ("{{ .AgentName", "unclosed"),
        ] {
            let error = render_template(template, &fragments(), &context()).unwrap_err();
            assert!(error.contains(expected), "{template}: {error}");
        }
    }
}
