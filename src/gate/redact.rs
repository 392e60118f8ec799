//! The redacted preview of a call's arguments stored in an ApprovalRequest: secrets replaced by
//! `[REDACTED]`, the whole cut to at most [`MAX_PREVIEW_BYTES`] of JSON.

use std::sync::LazyLock;

use regex::RegexSet;
use serde_json::{Map, Value};

use crate::api::approval_request::MAX_PREVIEW_BYTES;

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";
/// Key added to a preview that had to be cut; its value says how large the arguments were.
pub const TRUNCATED_KEY: &str = "(truncated)";
/// What replaces a value cut from a preview.
const TRUNCATED: &str = "[truncated]";
/// Longest string kept in a cut preview, in characters.
const MAX_STRING_CHARS: usize = 1024;
/// Most array items kept in a cut preview.
const MAX_ARRAY_ITEMS: usize = 64;
/// Deepest nesting kept in a cut preview.
const MAX_DEPTH: usize = 16;

/// Substrings of keys whose values are secrets (compared lowercase).
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "token",
    "secret",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "private_key",
    "privatekey",
    "private-key",
    "credential",
    "cookie",
];

/// String values that look like secrets.
static SECRET_VALUES: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new([
        r"\bsk-[A-Za-z0-9_-]{6,}",
        r"\bgh[pousr]_[A-Za-z0-9]{20,}",
        r"\bgithub_pat_[A-Za-z0-9_]{20,}",
        r"\bAKIA[0-9A-Z]{16}\b",
        r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----",
    ])
    .expect("secret patterns compile")
});

/// Whether a key names a secret.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|s| key.contains(s))
}

/// Whether a string value looks like a secret.
pub fn is_secret_value(value: &str) -> bool {
    SECRET_VALUES.is_match(value)
}

/// Replaces every secret in `value` by [`REDACTED`].
pub fn redact(value: &Value) -> Value {
    match value {
        Value::String(s) if is_secret_value(s) => Value::String(REDACTED.into()),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if is_secret_key(k) {
                        Value::String(REDACTED.into())
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The preview of a call's arguments: redacted, an object (non-object arguments are wrapped
/// under `(value)`), and at most [`MAX_PREVIEW_BYTES`] when serialized. A preview that had to
/// be cut carries [`TRUNCATED_KEY`].
pub fn preview(arguments: &Value) -> Map<String, Value> {
    let map = match redact(arguments) {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => Map::from_iter([("(value)".to_string(), other)]),
    };
    let size = json_len(&Value::Object(map.clone()));
    if size <= MAX_PREVIEW_BYTES {
        return map;
    }
    cut(map, size)
}

/// Fits a too-large preview: shortens long strings, arrays and deep nesting, then keeps entries
/// in order while they fit.
fn cut(map: Map<String, Value>, original_bytes: usize) -> Map<String, Value> {
    let marker = Value::String(format!(
        "preview cut to fit {MAX_PREVIEW_BYTES} bytes; the redacted arguments were {original_bytes} bytes"
    ));
    // `{` + `}` + the marker entry and its comma.
    let mut used = 2 + entry_len(TRUNCATED_KEY, &marker) + 1;
    let mut out = Map::new();
    for (key, value) in map {
        let value = shrink(&value, 0);
        let value = if used + entry_len(&key, &value) < MAX_PREVIEW_BYTES {
            value
        } else {
            Value::String(TRUNCATED.into())
        };
        let len = entry_len(&key, &value) + 1;
        if used + len > MAX_PREVIEW_BYTES {
            break;
        }
        used += len;
        out.insert(key, value);
    }
    out.insert(TRUNCATED_KEY.into(), marker);
    out
}

fn shrink(value: &Value, depth: usize) -> Value {
    match value {
        _ if depth >= MAX_DEPTH => Value::String(TRUNCATED.into()),
        Value::String(s) if s.chars().count() > MAX_STRING_CHARS => {
            let kept: String = s.chars().take(MAX_STRING_CHARS).collect();
            Value::String(format!("{kept}…{TRUNCATED}"))
        }
        Value::Array(items) => {
            let mut kept: Vec<Value> = items
                .iter()
                .take(MAX_ARRAY_ITEMS)
                .map(|v| shrink(v, depth + 1))
                .collect();
            if items.len() > MAX_ARRAY_ITEMS {
                kept.push(Value::String(format!(
                    "{TRUNCATED} {} more items",
                    items.len() - MAX_ARRAY_ITEMS
                )));
            }
            Value::Array(kept)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), shrink(v, depth + 1)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

/// Serialized length of `"key":value`.
fn entry_len(key: &str, value: &Value) -> usize {
    json_len(&Value::String(key.into())) + 1 + json_len(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn secret_keys_are_redacted_case_insensitively() {
        let got = preview(&json!({
            "Password": "x", "db_passwd": "x", "accessToken": "x", "client_secret": {"a": 1},
            "Authorization": "Bearer x", "api_key": "x", "apiKey": "x", "PRIVATE_KEY": "x",
            "credentials": ["x"], "Cookie": "x", "path": "/data/report.csv", "count": 3
        }));
        for key in [
            "Password",
            "db_passwd",
            "accessToken",
            "client_secret",
            "Authorization",
            "api_key",
            "apiKey",
            "PRIVATE_KEY",
            "credentials",
            "Cookie",
        ] {
            assert_eq!(got[key], json!(REDACTED), "{key}");
        }
        assert_eq!(got["path"], json!("/data/report.csv"));
        assert_eq!(got["count"], json!(3));
    }

    #[test]
    fn secret_looking_values_are_redacted_anywhere() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl";
        let got = preview(&json!({
            "a": "sk-proj-abcdef123456",
            "b": "token is ghp_abcdefghijklmnopqrstuvwxyz0123",
            "c": "github_pat_11ABCDEFGHIJKLMNOPQRSTUV_xyz",
            "d": "AKIAABCDEFGHIJKLMNOP",
            "e": jwt,
            "f": "-----BEGIN RSA PRIVATE KEY-----\nMIIE...",
            "nested": {"list": ["plain", "sk-ant-api03-secretvalue"]},
            "task-force": "ask-me later",
            "akia": "AKIA-not-a-key",
        }));
        for key in ["a", "b", "c", "d", "e", "f"] {
            assert_eq!(got[key], json!(REDACTED), "{key}");
        }
        assert_eq!(got["nested"]["list"], json!(["plain", REDACTED]));
        assert_eq!(got["task-force"], json!("ask-me later"));
        assert_eq!(got["akia"], json!("AKIA-not-a-key"));
    }

    #[test]
    fn non_objects_are_wrapped_and_null_is_empty() {
        assert_eq!(preview(&json!(null)), Map::new());
        assert_eq!(
            Value::Object(preview(&json!([1, "sk-abcdefghij"]))),
            json!({"(value)": [1, REDACTED]})
        );
    }

    #[test]
    fn large_arguments_are_cut_and_marked() {
        let big = "x".repeat(50_000);
        let many: Vec<u32> = (0..10_000).collect();
        let got = preview(&json!({"small": "keep me", "big": big, "many": many}));
        let len = serde_json::to_vec(&got).unwrap().len();
        assert!(len <= MAX_PREVIEW_BYTES, "{len}");
        assert_eq!(got["small"], json!("keep me"));
        assert!(got["big"].as_str().unwrap().ends_with("…[truncated]"));
        assert_eq!(got["many"].as_array().unwrap().len(), MAX_ARRAY_ITEMS + 1);
        assert!(got[TRUNCATED_KEY].as_str().unwrap().contains("bytes"));
        let small = preview(&json!({"a": 1}));
        assert!(!small.contains_key(TRUNCATED_KEY));
    }

    #[test]
    fn many_keys_stop_when_full() {
        let map: Map<String, Value> = (0..5_000)
            .map(|i| (format!("key{i:05}"), json!("v".repeat(100))))
            .collect();
        let got = preview(&Value::Object(map));
        assert!(serde_json::to_vec(&got).unwrap().len() <= MAX_PREVIEW_BYTES);
        assert!(got.contains_key("key00000"));
        assert!(!got.contains_key("key04999"));
        assert!(got.contains_key(TRUNCATED_KEY));
    }

    const CANARIES: &[&str] = &[
        "sk-canary0123456789",
        "ghp_CANARYabcdefghijklmnopqrstu",
        "AKIACANARY0123456789",
        "eyJcanary.eyJcanary.canarysig",
    ];

    fn json_value() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            "[a-z_]{1,12}",
            Just("password".to_string()),
            Just("X-Api-Key".to_string()),
            Just("sessionToken".to_string()),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[ -~]{0,40}".prop_map(Value::String),
            (0..CANARIES.len(), "[ a-z]{0,8}")
                .prop_map(|(i, pre)| Value::String(format!("{pre} {}", CANARIES[i]))),
            "[ -~]{0,3000}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 400, 12, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..12)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn previews_fit_and_hold_no_canary(v in json_value()) {
            let got = Value::Object(preview(&v));
            let text = serde_json::to_string(&got).unwrap();
            prop_assert!(text.len() <= MAX_PREVIEW_BYTES);
            for canary in CANARIES {
                prop_assert!(!text.contains(canary), "{canary} leaked");
            }
        }

        #[test]
        fn redaction_is_idempotent(v in json_value()) {
            let once = redact(&v);
            prop_assert_eq!(redact(&once), once);
        }

        #[test]
        fn secret_keys_never_keep_their_value(k in "[a-zA-Z]{0,5}(password|TOKEN|Secret|cookie)[a-z]{0,5}", s in "[a-z]{1,20}") {
            let got = preview(&json!({ k.clone(): s }));
            prop_assert_eq!(&got[&k], &json!(REDACTED));
        }
    }
}
