//! The `when` of an approval rule: a CEL expression over one tool call, compiled once with
//! static bounds on its cost and evaluated on the call's arguments.
//!
//! The `cel` crate has no runtime budget, so the cost is bounded before anything runs:
//! the expression is at most [`MAX_WHEN_LENGTH`] characters and [`MAX_DEPTH`] levels deep, no
//! comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) runs inside another one's
//! body, it sees the arguments only when the call's message is at most [`MAX_INPUT_BYTES`],
//! and one with a comprehension only when no list or map in the arguments has more than
//! [`MAX_ITERATED_ITEMS`] entries. Outside those bounds the condition cannot be evaluated,
//! which asks for approval. One evaluation then costs at most about (expression size) x
//! (input size), times [`MAX_ITERATED_ITEMS`] with a comprehension.
//!
//! Besides CEL's standard functions a condition can call `cleanPath(s)` ([`clean_path`]),
//! which normalises a POSIX path in one pass, so that bound holds with it too.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::objects::{Key, Map};
use cel::{Context, Program, Value};

use crate::tool_risk::ToolFacts;

pub use crate::api::agent::MAX_WHEN_LENGTH;

pub mod clean_path;

/// Deepest expression tree accepted (nesting of calls, operators, selections and literals):
/// evaluation recurses once a level, on the gate's 2 MiB worker stacks.
pub const MAX_DEPTH: usize = 24;

/// Stack of the thread that parses an expression: the generated parser takes about 100 KiB a
/// nesting level in a debug build, and refuses more than 96 levels.
const PARSER_STACK_BYTES: usize = 64 << 20;

/// Largest arguments, as the JSON the gate read, that a condition is evaluated on: 64 KiB.
pub const MAX_INPUT_BYTES: usize = 64 << 10;

/// Most entries of any list or map in the arguments of a call that a condition with a
/// comprehension is evaluated on (`args.a.all(x, x in args.b)` costs their product).
pub const MAX_ITERATED_ITEMS: usize = 256;

/// The variables a condition can use.
pub const VARIABLES: [&str; 7] = [
    "args",
    "agent",
    "namespace",
    "server",
    "tool",
    "session",
    "annotations",
];

/// A compiled `when` expression.
#[derive(Debug)]
pub struct Condition {
    program: Program,
    /// Whether it has a comprehension, so its cost grows with the size of collections.
    iterates: bool,
    /// Whether it reads `annotations`, so the tool's listed annotations must be looked up.
    reads_annotations: bool,
}

impl Condition {
    /// Parses `source` and checks its static bounds; the error says what is wrong.
    pub fn compile(source: &str) -> Result<Self, String> {
        let length = source.chars().count();
        if length > MAX_WHEN_LENGTH {
            return Err(format!(
                "the expression is {length} characters long; at most {MAX_WHEN_LENGTH} are allowed"
            ));
        }
        let source = source.to_owned();
        std::thread::Builder::new()
            .name("cel-compile".into())
            .stack_size(PARSER_STACK_BYTES)
            .spawn(move || {
                let program = Program::compile(&source).map_err(|errors| {
                    let each: Vec<String> = errors
                        .errors
                        .iter()
                        .map(|e| format!("{}:{}: {}", e.pos.0, e.pos.1, e.msg))
                        .collect();
                    format!("CEL: {}", each.join("; "))
                })?;
                let mut found = Found::default();
                check(program.expression(), &mut Vec::new(), &mut found, false, 1)?;
                Ok(Self {
                    program,
                    iterates: found.iterates,
                    reads_annotations: found.reads_annotations,
                })
            })
            .map_err(|e| format!("the CEL compiler could not start: {e}"))?
            .join()
            .unwrap_or_else(|_| Err("the CEL compiler failed".into()))
    }

    /// Whether it reads the tool's annotations (the variable `annotations`).
    pub fn reads_annotations(&self) -> bool {
        self.reads_annotations
    }

    /// Whether the condition holds for `call`. An error — the arguments over the input bound,
    /// a missing key, a type mismatch, a result that is not a bool — says why it could not be
    /// evaluated.
    pub fn evaluate(&self, call: &Activation) -> Result<bool, String> {
        let context = call.context.as_ref().map_err(Clone::clone)?;
        if self.iterates && call.largest_collection > MAX_ITERATED_ITEMS {
            return Err(format!(
                "the arguments hold a list or map of {} entries; conditions with a comprehension are evaluated on at most {MAX_ITERATED_ITEMS}",
                call.largest_collection
            ));
        }
        match self.program.execute(context) {
            Ok(Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(format!(
                "the expression gave {:?}, not a bool",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What [`check`] finds in an expression.
#[derive(Debug, Default)]
struct Found {
    /// It has a comprehension.
    iterates: bool,
    /// It reads the variable `annotations`.
    reads_annotations: bool,
}

/// Checks the parsed expression: depth, variables, and no comprehension in another one's body;
/// notes what it has in `found`. `bound` holds the variables comprehensions
/// around `expr` bind.
fn check(
    expr: &IdedExpr,
    bound: &mut Vec<String>,
    found: &mut Found,
    in_comprehension: bool,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "the expression is nested more than {MAX_DEPTH} levels deep"
        ));
    }
    let next = depth + 1;
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) && name == "annotations" {
                found.reads_annotations = true;
            }
            if !bound.contains(name) && !VARIABLES.contains(&name.as_str()) {
                return Err(format!(
                    "undeclared reference to '{name}': a condition can use {}",
                    VARIABLES.join(", ")
                ));
            }
        }
        Expr::Comprehension(comprehension) => {
            if in_comprehension {
                return Err(
                    "a comprehension (all, exists, exists_one, map, filter) inside the body of another one is not allowed: its cost would grow with the square of the arguments"
                        .into(),
                );
            }
            found.iterates = true;
            check(
                &comprehension.iter_range,
                bound,
                found,
                in_comprehension,
                next,
            )?;
            check(
                &comprehension.accu_init,
                bound,
                found,
                in_comprehension,
                next,
            )?;
            let scope = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            for body in [
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                check(body, bound, found, true, next)?;
            }
            bound.truncate(scope);
        }
        Expr::Call(call) => {
            if call.func_name == clean_path::NAME && (call.target.is_some() || call.args.len() != 1)
            {
                return Err(format!(
                    "{name} takes one argument, the path: {name}(args.path)",
                    name = clean_path::NAME
                ));
            }
            if let Some(target) = &call.target {
                check(target, bound, found, in_comprehension, next)?;
            }
            for arg in &call.args {
                check(arg, bound, found, in_comprehension, next)?;
            }
        }
        Expr::Select(select) => check(&select.operand, bound, found, in_comprehension, next)?,
        Expr::List(list) => {
            for element in &list.elements {
                check(element, bound, found, in_comprehension, next)?;
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(entry) = &entry.expr {
                    check(&entry.key, bound, found, in_comprehension, next)?;
                    check(&entry.value, bound, found, in_comprehension, next)?;
                }
            }
        }
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                if let EntryExpr::StructField(field) = &entry.expr {
                    check(&field.value, bound, found, in_comprehension, next)?;
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
    Ok(())
}

/// What the conditions of one call see, converted to CEL values once for all its rules.
pub struct Activation {
    context: Result<Context<'static>, String>,
    /// Entries of the largest list or map in the arguments.
    largest_collection: usize,
}

/// The facts of one tool call a condition can read.
#[derive(Clone, Copy, Debug)]
pub struct CallFacts<'a> {
    /// The call's arguments (`{}` when it sent none).
    pub args: &'a serde_json::Value,
    /// Size of the arguments as JSON, in bytes, to hold them to [`MAX_INPUT_BYTES`].
    pub args_bytes: usize,
    /// The Agent's name.
    pub agent: &'a str,
    /// The Agent's namespace.
    pub namespace: &'a str,
    /// The tool server's name.
    pub server: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The MCP session id, when the client sent one.
    pub session: Option<&'a str>,
    /// The tool's annotations as this condition may see them ([`ToolFacts::for_allowing`]
    /// for a rule that lets the call through).
    pub annotations: ToolFacts,
}

impl Activation {
    /// The variables of `call`; arguments over [`MAX_INPUT_BYTES`] make every evaluation fail.
    pub fn new(call: &CallFacts) -> Self {
        if call.args_bytes > MAX_INPUT_BYTES {
            return Self {
                context: Err(format!(
                    "the arguments are {} bytes; conditions are evaluated on at most {} KiB",
                    call.args_bytes,
                    MAX_INPUT_BYTES >> 10
                )),
                largest_collection: 0,
            };
        }
        let mut largest_collection = 0;
        let mut context = Context::default();
        context.add_function(clean_path::NAME, clean_path::function);
        context.add_variable_from_value("args", cel_value(call.args, &mut largest_collection));
        for (name, value) in [
            ("agent", call.agent),
            ("namespace", call.namespace),
            ("server", call.server),
            ("tool", call.tool),
        ] {
            context.add_variable_from_value(name, value);
        }
        context.add_variable_from_value(
            "session",
            call.session
                .map_or(Value::Null, |s| Value::String(Arc::new(s.to_owned()))),
        );
        context.add_variable_from_value("annotations", annotations_value(&call.annotations));
        Self {
            context: Ok(context),
            largest_collection,
        }
    }
}

/// The `annotations` variable: the four hints (MCP defaults filled in) by their MCP names,
/// `trusted` and `listed`.
fn annotations_value(facts: &ToolFacts) -> Value {
    let h = facts.hints;
    let entries: HashMap<Key, Value> = [
        ("readOnlyHint", h.read_only),
        ("destructiveHint", h.destructive),
        ("idempotentHint", h.idempotent),
        ("openWorldHint", h.open_world),
        ("trusted", facts.trusted),
        ("listed", facts.listed),
    ]
    .into_iter()
    .map(|(k, v)| (Key::String(Arc::new(k.to_owned())), Value::Bool(v)))
    .collect();
    Value::Map(Map {
        map: Arc::new(entries),
    })
}

/// A JSON value as CEL sees it: integers as `int` (or `uint` above `int`'s range), other
/// numbers as `double`, objects as maps with string keys. Raises `largest` to the entries of
/// the largest list or map in it.
fn cel_value(value: &serde_json::Value, largest: &mut usize) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            *largest = (*largest).max(items.len());
            Value::List(Arc::new(
                items.iter().map(|item| cel_value(item, largest)).collect(),
            ))
        }
        serde_json::Value::Object(map) => {
            *largest = (*largest).max(map.len());
            let entries: HashMap<Key, Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), cel_value(v, largest)))
                .collect();
            Value::Map(Map {
                map: Arc::new(entries),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(source: &str, args: serde_json::Value) -> Result<bool, String> {
        let condition = Condition::compile(source)?;
        let args_bytes = args.to_string().len();
        condition.evaluate(&Activation::new(&CallFacts {
            args: &args,
            args_bytes,
            agent: "payments",
            namespace: "team-a",
            server: "bank",
            tool: "transfer_funds",
            session: Some("s-1"),
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        }))
    }

    #[test]
    fn a_threshold_on_an_argument() {
        assert_eq!(
            eval("args.amount > 1000", json!({"amount": 1500})),
            Ok(true)
        );
        assert_eq!(eval("args.amount > 1000", json!({"amount": 10})), Ok(false));
        assert_eq!(
            eval("args.amount > 1000.5", json!({"amount": 1000.75})),
            Ok(true)
        );
    }

    #[test]
    fn strings_lists_and_the_call_facts() {
        assert_eq!(
            eval(
                "args.path.startsWith('/etc/')",
                json!({"path": "/etc/passwd"})
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                "args.paths.exists(p, p.startsWith('/etc/'))",
                json!({"paths": ["/tmp/a", "/etc/b"]})
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                "agent == 'payments' && namespace == 'team-a' && server == 'bank' && tool == 'transfer_funds' && session == 's-1'",
                json!({})
            ),
            Ok(true)
        );
        assert_eq!(
            eval("has(args.amount) && args.amount > 5", json!({})),
            Ok(false)
        );
    }

    #[test]
    fn a_missing_key_a_wrong_type_or_a_non_bool_cannot_be_evaluated() {
        let missing = eval("args.amount > 1000", json!({"to": "x"})).unwrap_err();
        assert!(missing.contains("amount"), "{missing}");
        assert!(eval("args.amount > 1000", json!({"amount": "lots"})).is_err());
        let not_bool = eval("args.amount", json!({"amount": 3})).unwrap_err();
        assert!(not_bool.contains("not a bool"), "{not_bool}");
        assert!(eval("args.path.startsWith('/')", json!({"path": 7})).is_err());
    }

    #[test]
    fn a_session_unknown_is_null() {
        let condition = Condition::compile("session == null").unwrap();
        let args = json!({});
        let facts = CallFacts {
            args: &args,
            args_bytes: 2,
            agent: "a",
            namespace: "n",
            server: "s",
            tool: "t",
            session: None,
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        };
        assert_eq!(condition.evaluate(&Activation::new(&facts)), Ok(true));
    }

    #[test]
    fn arguments_over_the_input_bound_cannot_be_evaluated() {
        let condition = Condition::compile("true").unwrap();
        let args = json!({});
        let facts = CallFacts {
            args: &args,
            args_bytes: MAX_INPUT_BYTES + 1,
            agent: "a",
            namespace: "n",
            server: "s",
            tool: "t",
            session: None,
            annotations: crate::tool_risk::ToolFacts::unlisted(false),
        };
        let why = condition.evaluate(&Activation::new(&facts)).unwrap_err();
        assert!(why.contains("64 KiB"), "{why}");
    }

    #[test]
    fn comprehensions_run_only_over_small_collections() {
        let big = json!({"a": vec![1; MAX_ITERATED_ITEMS + 1], "b": [1]});
        let why = eval("args.a.exists(x, x == 2)", big.clone()).unwrap_err();
        assert!(why.contains("at most 256"), "{why}");
        assert_eq!(eval("size(args.a) > 2", big), Ok(true));
        let small = json!({"a": vec![1; MAX_ITERATED_ITEMS], "b": [2]});
        assert_eq!(eval("args.a.all(x, !(x in args.b))", small), Ok(true));
    }

    #[test]
    fn clean_path_compares_the_path_a_call_names() {
        let rule = "cleanPath(args.path).startsWith('/tmp/')";
        for (path, under_tmp) in [
            ("/tmp/a/../b", true),
            ("/tmp/../etc/x", false),
            ("/tmp/./../etc", false),
            ("//tmp/../etc", false),
            ("/tmp", false),
        ] {
            assert_eq!(eval(rule, json!({"path": path})), Ok(under_tmp), "{path}");
        }
        // No normal form, or not a string: the condition cannot be evaluated (it asks).
        for args in [
            json!({"path": "/etc/passwd\0/../../tmp/x"}),
            json!({"path": "../tmp/x"}),
            json!({"path": 7}),
        ] {
            let why = eval(rule, args.clone()).unwrap_err();
            assert!(!why.is_empty(), "{args}");
        }
        let nul = eval(rule, json!({"path": "/tmp/x\0"})).unwrap_err();
        assert!(nul.contains("cleanPath") && nul.contains("NUL"), "{nul}");
        // It works where the path is in a list, once per element.
        assert_eq!(
            eval(
                "args.paths.all(p, cleanPath(p).startsWith('/tmp/'))",
                json!({"paths": ["/tmp/a", "/tmp/b/../c"]})
            ),
            Ok(true)
        );
    }

    #[test]
    fn clean_path_takes_exactly_one_argument() {
        for source in [
            "cleanPath() == '/'",
            "cleanPath(args.a, args.b) == '/'",
            "args.path.cleanPath() == '/'",
        ] {
            let why = Condition::compile(source).unwrap_err();
            assert!(
                why.contains("cleanPath takes one argument"),
                "{source}: {why}"
            );
        }
    }

    #[test]
    fn syntax_errors_and_unknown_variables_do_not_compile() {
        assert!(
            Condition::compile("args.amount >")
                .unwrap_err()
                .starts_with("CEL: ")
        );
        let typo = Condition::compile("arg.amount > 1").unwrap_err();
        assert!(typo.contains("'arg'"), "{typo}");
    }

    #[test]
    fn annotations_are_read_with_the_defaults_and_noted_at_compile_time() {
        let reads =
            Condition::compile("annotations.destructiveHint && !annotations.trusted").unwrap();
        assert!(reads.reads_annotations());
        // A comprehension's own variable named `annotations` is not the tool's.
        let shadowed = Condition::compile("args.xs.exists(annotations, annotations == 1)").unwrap();
        assert!(!shadowed.reads_annotations());
        assert!(
            !Condition::compile("args.x == 'annotations'")
                .unwrap()
                .reads_annotations()
        );
        // Nothing listed: the MCP defaults (destructive, open-world), not trusted.
        assert_eq!(
            eval(
                "annotations.destructiveHint && annotations.openWorldHint",
                json!({})
            ),
            Ok(true)
        );
        assert_eq!(
            eval(
                "annotations.readOnlyHint || annotations.idempotentHint",
                json!({})
            ),
            Ok(false)
        );
        assert_eq!(
            eval("annotations.listed || annotations.trusted", json!({})),
            Ok(false)
        );
        let typo = Condition::compile("annotation.readOnlyHint").unwrap_err();
        assert!(
            typo.contains("'annotation'") && typo.contains("annotations"),
            "{typo}"
        );
    }

    #[test]
    fn nested_comprehensions_do_not_compile_sequential_ones_do() {
        let nested = Condition::compile("args.a.all(x, args.b.exists(y, y == x))").unwrap_err();
        assert!(nested.contains("inside the body of another"), "{nested}");
        assert!(Condition::compile("args.a.map(x, args.b.filter(y, y > x))").is_err());
        assert_eq!(
            eval(
                "args.a.filter(x, x > 1).all(y, y < 5)",
                json!({"a": [1, 2, 3]})
            ),
            Ok(true)
        );
    }

    #[test]
    fn the_length_and_depth_are_bounded() {
        let long = format!("args.s == '{}'", "x".repeat(MAX_WHEN_LENGTH));
        assert!(
            Condition::compile(&long)
                .unwrap_err()
                .contains("at most 2048")
        );
        let lists = |n: usize| format!("size({}1{}) == 1", "[".repeat(n), "]".repeat(n));
        // The deepest accepted expression evaluates on a 2 MiB stack (a test thread's).
        assert_eq!(eval(&lists(MAX_DEPTH - 3), json!({})), Ok(true));
        assert!(
            Condition::compile(&lists(MAX_DEPTH))
                .unwrap_err()
                .contains("levels deep")
        );
        let chain = format!("{}1 > 0", "1 + ".repeat(100));
        assert!(
            Condition::compile(&chain)
                .unwrap_err()
                .contains("levels deep")
        );
    }
}
