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
