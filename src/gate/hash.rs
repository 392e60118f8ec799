//! The identity of a call's arguments: an HMAC-SHA256 of their RFC 8785 canonical JSON, keyed
//! with the Agent's binding key. It binds an approval to the exact call, yet reveals nothing
//! about the arguments to whoever can read the ApprovalRequest: without the key, a guessed
//! secret cannot be checked against it (DESIGN.md §4 invariant 6).

use crate::contract::binding_key::BindingKey;

/// Binding hash and size of a call's full arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgsDigest {
    /// Lowercase hex HMAC-SHA256 of the canonical JSON (64 digits): `spec.argumentsSha256`.
    pub binding: String,
    /// Length in bytes of the canonical JSON.
    pub bytes: usize,
}

impl ArgsDigest {
    /// The first 16 hex digits, used as the `kagent.dev/args-hash` label.
    pub fn short(&self) -> &str {
        &self.binding[..16]
    }
}

/// Canonicalizes `arguments` (RFC 8785) and hashes them with `key`.
pub fn digest(
    key: &BindingKey,
    arguments: &serde_json::Value,
) -> Result<ArgsDigest, serde_json::Error> {
    let canonical = canonical_json(arguments)?;
    Ok(ArgsDigest {
        binding: key.sign(canonical.as_bytes()),
        bytes: canonical.len(),
    })
}

/// RFC 8785 canonical JSON of `value`. Strings and floating-point numbers are formatted by
/// `json-canon`; integers are written as their exact decimal digits, which is what RFC 8785
/// yields inside the IEEE-754 safe range and keeps larger integers (which `json-canon` refuses
/// and other canonicalizers round) distinct. Object keys are sorted by UTF-16 code units.
pub fn canonical_json(value: &serde_json::Value) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    write_canonical(&mut out, value)?;
    Ok(out)
}

fn write_canonical(out: &mut String, value: &serde_json::Value) -> Result<(), serde_json::Error> {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_u64() || n.is_i64() => out.push_str(&n.to_string()),
        Value::Number(_) | Value::String(_) => out.push_str(&json_canon::to_string(value)?),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_canon::to_string(key)?);
                out.push(':');
                write_canonical(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(s: &str) -> serde_json::Value {
        serde_json::from_str(s).unwrap()
    }

    fn key() -> BindingKey {
        BindingKey::from_bytes(&[0x0b; 32]).unwrap()
    }

    fn digest(arguments: &serde_json::Value) -> Result<ArgsDigest, serde_json::Error> {
        super::digest(&key(), arguments)
    }

    #[test]
    fn known_vector() {
        let d = digest(&json!({})).unwrap();
        // HMAC-SHA256 with key 0x0b * 32 of "{}" (python3: hmac.new(b"\x0b"*32, b"{}", "sha256"))
        assert_eq!(
            d.binding,
            "fa29380faac1fde617f57047c66ac7f41bc76a06f14822661f4f16369d684578"
        );
        assert_eq!(d.bytes, 2);
        assert_eq!(d.short(), &d.binding[..16]);
    }

    #[test]
    fn the_hash_depends_on_the_key_and_reveals_no_plain_digest() {
        let other = BindingKey::from_bytes(&[0x0c; 32]).unwrap();
        let arguments = json!({"token": "sk-live-123"});
        let a = digest(&arguments).unwrap();
        let b = super::digest(&other, &arguments).unwrap();
        assert_ne!(a.binding, b.binding);
        // Not the plain SHA-256 anyone could recompute from a guessed secret.
        use sha2::{Digest, Sha256};
        let plain = hex::encode(Sha256::digest(
            canonical_json(&arguments).unwrap().as_bytes(),
        ));
        assert_ne!(a.binding, plain);
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = digest(&parse(r#"{"b": 1, "a": [1, 2, {"y": "z", "x": null}]}"#)).unwrap();
        let b = digest(&parse(r#"{"a":[1,2,{"x":null,"y":"z"}],"b":1}"#)).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.bytes, r#"{"a":[1,2,{"x":null,"y":"z"}],"b":1}"#.len());
    }

    #[test]
    fn integers_above_2_pow_53_stay_distinct() {
        let a = digest(&parse(r#"{"n": 9007199254740993}"#)).unwrap();
        let b = digest(&parse(r#"{"n": 9007199254740992}"#)).unwrap();
        assert_ne!(a.binding, b.binding);
    }

    #[test]
    fn rfc8785_formatting_of_strings_floats_and_key_order() {
        let v = parse(
            r#"{"\u20ac": 1, "\r": 2, "a": 1.0, "b": 1e21, "c": 0.000001, "d": "\u00e9\n\u0001"}"#,
        );
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"\\r\":2,\"a\":1,\"b\":1e+21,\"c\":0.000001,\"d\":\"\u{e9}\\n\\u0001\",\"\u{20ac}\":1}"
        );
        // UTF-16 order: U+FB33 (one unit) sorts after U+1F600 (surrogate pair 0xD83D...).
        let v = parse(r#"{"\ufb33": 1, "\ud83d\ude00": 2}"#);
        assert_eq!(
            canonical_json(&v).unwrap(),
            "{\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn different_values_differ() {
        let a = digest(&json!({"path": "/data/a"})).unwrap();
        let b = digest(&json!({"path": "/data/b"})).unwrap();
        assert_ne!(a.binding, b.binding);
        assert_eq!(a.binding.len(), 64);
    }
}
