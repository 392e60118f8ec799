use proptest::prelude::*;
use serde_json::json;

use super::*;

fn preview_of(arguments: &Value) -> Map<String, Value> {
    redact::preview(arguments)
}

#[test]
fn applies_a_patch_to_the_full_arguments() {
    let args = json!({"path": "/tmp/a", "recursive": true, "n": 9007199254740993u64});
    let patch = parse(
        r#"[{"op":"replace","path":"/path","value":"/tmp/b"},{"op":"remove","path":"/recursive"}]"#,
    )
    .unwrap();
    let edited = apply(&args, &patch).unwrap();
    assert_eq!(edited, json!({"path": "/tmp/b", "n": 9007199254740993u64}));
    assert_eq!(changed_paths(&patch), vec!["/path", "/recursive"]);
    // Absent arguments are `{}`.
    let add = parse(r#"[{"op":"add","path":"/x","value":1}]"#).unwrap();
    assert_eq!(apply(&Value::Null, &add).unwrap(), json!({"x": 1}));
}

#[test]
fn a_patch_that_cannot_apply_names_its_path() {
    let args = json!({"path": "/tmp/a"});
    let patch = parse(r#"[{"op":"replace","path":"/nope","value":1}]"#).unwrap();
    let refusal = apply(&args, &patch).unwrap_err();
    assert_eq!(refusal.path.as_deref(), Some("/nope"));
    assert!(
        refusal
            .to_string()
            .starts_with("at /nope: operation 1 (replace) cannot be applied"),
        "{refusal}"
    );
    let test = parse(r#"[{"op":"test","path":"/path","value":"/etc"}]"#).unwrap();
    assert!(
        apply(&args, &test)
            .unwrap_err()
            .reason
            .contains("value did not match")
    );
    let root = parse(r#"[{"op":"replace","path":"","value":[1]}]"#).unwrap();
    assert_eq!(
        apply(&args, &root).unwrap_err().to_string(),
        "at the arguments' root: the edited arguments are not an object; a tool's arguments must be one"
    );
    assert!(
        apply(&json!([1]), &test)
            .unwrap_err()
            .reason
            .contains("not an object")
    );
}

#[test]
fn malformed_patches_are_refused() {
    for (text, why) in [
        ("{}", "not a JSON Patch"),
        ("[]", "no operations"),
        (r#"[{"op":"frobnicate","path":"/a"}]"#, "not a JSON Patch"),
        (r#"[{"op":"add","path":"a","value":1}]"#, "not a JSON Patch"),
    ] {
        let refusal = parse(text).unwrap_err();
        assert!(refusal.reason.contains(why), "{text}: {refusal}");
    }
    let many = format!(
        "[{}]",
        vec![r#"{"op":"remove","path":"/a"}"#; MAX_OPERATIONS + 1].join(",")
    );
    assert!(parse(&many).unwrap_err().reason.contains("at most 64"));
}

#[test]
fn redacted_values_are_replaced_whole_or_not_at_all() {
    let args = json!({"url": "https://x", "auth": {"token": "s3cr3t-value", "user": "bob"},
                      "note": "key sk-abcdefghijkl here"});
    let preview = preview_of(&args);
    let ok = |text: &str| check_redacted(&parse(text).unwrap(), &preview);
    // Replaced or removed whole, at the path or above it.
    ok(r#"[{"op":"replace","path":"/auth/token","value":"other"}]"#).unwrap();
    ok(r#"[{"op":"remove","path":"/auth/token"}]"#).unwrap();
    ok(r#"[{"op":"replace","path":"/auth","value":{}}]"#).unwrap();
    ok(r#"[{"op":"replace","path":"/note","value":"plain"}]"#).unwrap();
    ok(r#"[{"op":"replace","path":"/url","value":"https://y"}]"#).unwrap();
    // Probed, carried elsewhere or edited inside: refused, naming the path.
    for (text, path, why) in [
        (
            r#"[{"op":"test","path":"/auth/token","value":"s3cr3t-value"}]"#,
            "/auth/token",
            "probe",
        ),
        (
            r#"[{"op":"test","path":"/auth","value":{}}]"#,
            "/auth",
            "probe",
        ),
        (
            r#"[{"op":"copy","from":"/auth/token","path":"/url"}]"#,
            "/auth/token",
            "copied",
        ),
        (
            r#"[{"op":"move","from":"/note","path":"/url"}]"#,
            "/note",
            "moved",
        ),
        (
            r#"[{"op":"move","from":"/auth","path":"/url"}]"#,
            "/auth",
            "moved",
        ),
    ] {
        let refusal = ok(text).unwrap_err();
        assert_eq!(refusal.path.as_deref(), Some(path), "{text}");
        assert!(refusal.reason.contains(why), "{text}: {refusal}");
    }
}

#[test]
fn inside_a_redacted_value_is_refused() {
    // A key holding a secret pattern is redacted as a key: below it nothing may be edited.
    let args = json!({"sk-abcdefghijkl": {"a": 1}});
    let preview = preview_of(&args);
    let path = redact::redacted_paths(&preview)[0].clone();
    let text = format!(r#"[{{"op":"replace","path":"{path}/a","value":2}}]"#);
    let refusal = check_redacted(&parse(&text).unwrap(), &preview).unwrap_err();
    assert!(refusal.reason.contains("replaced whole"), "{refusal}");
}

#[test]
fn diff_gives_the_patch_from_the_original_to_the_edit() {
    let original = json!({"a": 1, "b": [1, 2]});
    assert_eq!(diff(&original, &original), None);
    let edited = json!({"a": 2, "b": [1], "c": "x"});
    let patch = parse(&diff(&original, &edited).unwrap()).unwrap();
    assert_eq!(apply(&original, &patch).unwrap(), edited);
}

#[test]
fn changes_show_each_changed_value_before_and_after() {
    let original = json!({"path": "/data/c.csv", "recursive": true, "mode": "fast"});
    let patch = parse(
        r#"[{"op":"replace","path":"/path","value":"/data/old/c.csv"},
            {"op":"remove","path":"/recursive"},
            {"op":"add","path":"/dryRun","value":{"on":true}},
            {"op":"move","from":"/mode","path":"/speed"},
            {"op":"test","path":"/path","value":"/data/old/c.csv"}]"#,
    )
    .unwrap();
    let edited = apply(&original, &patch).unwrap();
    let shown: Vec<(String, Option<String>, Option<String>)> = changes(&original, &edited, &patch)
        .into_iter()
        .map(|c| (c.path, c.before, c.after))
        .collect();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        shown,
        vec![
            (
                "/path".into(),
                some(r#""/data/c.csv""#),
                some(r#""/data/old/c.csv""#)
            ),
            ("/recursive".into(), some("true"), None),
            ("/dryRun".into(), None, some(r#"{"on":true}"#)),
            ("/mode".into(), some(r#""fast""#), None),
            ("/speed".into(), None, some(r#""fast""#)),
        ]
    );
}

fn small_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z]{1,4}", value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    /// The patch `--edit` computes always takes the original to exactly the edit.
    #[test]
    fn diff_then_apply_round_trips(original in small_object(), edited in small_object()) {
        match diff(&original, &edited) {
            None => prop_assert_eq!(&original, &edited),
            Some(text) => {
                let patch = parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(apply(&original, &patch).unwrap(), edited);
            }
        }
    }

    /// Nothing below a redacted value is ever let through, whatever the operation.
    #[test]
    fn nothing_below_a_secret_passes(op in prop::sample::select(vec!["add", "remove", "replace", "test"]), tail in "[a-z]{1,4}") {
        let args = json!({"password": {"inner": "x"}});
        let preview = preview_of(&args);
        let text = format!(r#"[{{"op":"{op}","path":"/password/inner/{tail}","value":1}}]"#);
        prop_assert!(check_redacted(&parse(&text).unwrap(), &preview).is_err());
    }
}

fn edits(allowed: Option<bool>, paths: Option<&[&str]>) -> RuleEdits {
    RuleEdits {
        allowed,
        paths: paths.map(|p| p.iter().map(|s| (*s).to_owned()).collect()),
    }
}

#[test]
fn a_rule_may_forbid_edits() {
    let patch = parse(r#"[{"op":"replace","path":"/path","value":"/tmp/b"}]"#).unwrap();
    let refusal = check_rule(&patch, "frozen", &edits(Some(false), None)).unwrap_err();
    assert_eq!(refusal.to_string(), "rule 'frozen' forbids edits");
    // allowed: false wins over paths that would cover the edit.
    assert!(check_rule(&patch, "frozen", &edits(Some(false), Some(&["/path"]))).is_err());
    // Unset and true allow any path.
    check_rule(&patch, "r", &edits(None, None)).unwrap();
    check_rule(&patch, "r", &edits(Some(true), None)).unwrap();
}

#[test]
fn a_rules_paths_cover_whole_segments() {
    let rule = edits(None, Some(&["/a", "/list/0"]));
    let check = |ops: &str| check_rule(&parse(ops).unwrap(), "scoped", &rule);
    check(r#"[{"op":"replace","path":"/a","value":1}]"#).unwrap();
    check(r#"[{"op":"add","path":"/a/b/c","value":1}]"#).unwrap();
    check(r#"[{"op":"remove","path":"/list/0/x"}]"#).unwrap();
    let refusal = check(r#"[{"op":"replace","path":"/ab","value":1}]"#).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "at /ab: rule 'scoped' lets approvers edit only /a, /list/0"
    );
    assert_eq!(
        check(r#"[{"op":"remove","path":"/list/01"}]"#)
            .unwrap_err()
            .path
            .as_deref(),
        Some("/list/01")
    );
    // A test is an operation too.
    assert!(check(r#"[{"op":"test","path":"/b","value":1}]"#).is_err());
    // Every operation is checked, not only the first.
    assert!(
        check(r#"[{"op":"replace","path":"/a","value":1},{"op":"add","path":"/b","value":1}]"#)
            .is_err()
    );
}

#[test]
fn a_rules_paths_bind_the_from_of_move_and_copy() {
    let rule = edits(None, Some(&["/a"]));
    let check = |ops: &str| check_rule(&parse(ops).unwrap(), "scoped", &rule);
    check(r#"[{"op":"move","from":"/a/x","path":"/a/y"}]"#).unwrap();
    for op in ["move", "copy"] {
        let refusal = check(&format!(
            r#"[{{"op":"{op}","from":"/secret","path":"/a/y"}}]"#
        ))
        .unwrap_err();
        assert_eq!(refusal.path.as_deref(), Some("/secret"), "{op}");
        let refusal =
            check(&format!(r#"[{{"op":"{op}","from":"/a/x","path":"/b"}}]"#)).unwrap_err();
        assert_eq!(refusal.path.as_deref(), Some("/b"), "{op}");
    }
}

fn validator(schema: Value) -> jsonschema::Validator {
    jsonschema::options().offline().build(&schema).unwrap()
}

#[test]
fn edited_arguments_must_match_the_tools_input_schema() {
    let schema = validator(json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "opts": {"type": "object", "properties": {"depth": {"type": "integer"}}}
        },
        "required": ["path"],
        "additionalProperties": false
    }));
    let preview = preview_of(&json!({"path": "/tmp/a"}));
    check_schema(&schema, &json!({"path": "/tmp/b"}), &preview).unwrap();
    let refusal = check_schema(
        &schema,
        &json!({"path": "/tmp/b", "opts": {"depth": "x"}}),
        &preview,
    )
    .unwrap_err();
    assert_eq!(refusal.path.as_deref(), Some("/opts/depth"));
    assert_eq!(
        refusal.to_string(),
        r#"at /opts/depth: the edited arguments do not match the tool's input schema: "x" is not of type "integer""#
    );
    let missing = check_schema(&schema, &json!({}), &preview).unwrap_err();
    assert_eq!(
        missing.to_string(),
        r#"at the arguments' root: the edited arguments do not match the tool's input schema: "path" is a required property"#
    );
}

#[test]
fn a_schema_refusal_quotes_nothing_near_a_redacted_value() {
    let schema = validator(json!({
        "type": "object",
        "properties": {"token": {"type": "integer"}, "n": {"type": "integer"}},
        "additionalProperties": false
    }));
    let secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB";
    let original = json!({"token": secret, "n": 1});
    let preview = preview_of(&original);
    assert_eq!(redact::redacted_paths(&preview), ["/token"]);
    // The original's secret fails the schema; the refusal must not quote it.
    let refusal = check_schema(&schema, &json!({"token": secret, "n": 2}), &preview).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        r#"at /token: the edited arguments do not match the tool's input schema: the value fails the schema's "type" keyword"#
    );
    // Away from the secret, the value is quoted.
    let refusal = check_schema(&schema, &json!({"token": 1, "n": "x"}), &preview).unwrap_err();
    assert!(
        refusal.to_string().contains(r#""x" is not of type"#),
        "{refusal}"
    );
    // At the root, above the secret: nothing quoted (no unexpected key names either).
    let refusal =
        check_schema(&schema, &json!({"token": 1, "extra": secret}), &preview).unwrap_err();
    assert_eq!(refusal.path.as_deref(), Some(""));
    assert!(!refusal.to_string().contains("extra"), "{refusal}");
}

#[test]
fn pointers_are_checked() {
    check_pointer("/a~0b/c~1d/-").unwrap();
    check_pointer("/").unwrap();
    assert_eq!(
        check_pointer("a").unwrap_err(),
        "a JSON pointer into the arguments starts with /"
    );
    for bad in ["/a~", "/a~2", "/~x"] {
        assert!(
            check_pointer(bad)
                .unwrap_err()
                .contains("~ must be followed by 0 or 1"),
            "{bad}"
        );
    }
}
