//! `cleanPath(s)`: the lexical normal form of a POSIX path, so that a condition compares the
//! path a call names rather than the way it is spelt. `args.path.startsWith('/tmp/')` is true
//! for `/tmp/../etc/passwd`; `cleanPath(args.path).startsWith('/tmp/')` is not, because
//! `cleanPath('/tmp/../etc/passwd')` is `/etc/passwd`.
//!
//! Semantics (docs/policies.md):
//! - `/` is the only separator. Empty components (`//`) and `.` are dropped; `..` removes the
//!   component before it. At the root of an absolute path `..` stays at the root, as POSIX
//!   resolves it: `/../etc` is `/etc`, `//tmp/../etc` is `/etc`.
//! - The result is absolute exactly when the path is; it never ends with `/` (but `/` itself);
//!   a relative path with nothing left is `.`.
//! - No result at all, so the condition cannot be evaluated and its rule asks for approval:
//!   for a path holding a NUL byte (a server written in C stops reading there, so it would
//!   open another path than the one cleaned), and for a relative path whose `..` climbs above
//!   its start (`../x`, `a/../../x`: what it names depends on the server's working directory).
//! - Lexical only: symbolic links, `~`, percent-encoding and `\` (an ordinary character in a
//!   POSIX name) are not interpreted.
//!
//! Cost: one pass over the path and a result no longer than it (or `.`), so a condition
//! calling it stays within the bounds of [`super::Condition`].

use std::sync::Arc;

use cel::{ExecutionError, FunctionContext, Value};

/// The function's name in conditions.
pub const NAME: &str = "cleanPath";

/// The lexical normal form of `path`, or why it has none (see the module's semantics).
pub fn clean_path(path: &str) -> Result<String, String> {
    if path.contains('\0') {
        return Err("the path holds a NUL byte".into());
    }
    let absolute = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if kept.pop().is_none() && !absolute {
                    return Err(format!(
                        "the relative path {path:?} climbs above its start with '..'"
                    ));
                }
            }
            name => kept.push(name),
        }
    }
    let joined = kept.join("/");
    Ok(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    })
}

/// `cleanPath(s)` as CEL calls it: a string in, a string out, an error for a path that has no
/// normal form or an argument that is not a string.
pub fn function(ftx: &FunctionContext, path: Arc<String>) -> Result<Value, ExecutionError> {
    clean_path(&path)
        .map(|clean| Value::String(Arc::new(clean)))
        .map_err(|why| ftx.error(why))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn dots_and_doubled_slashes_are_resolved() {
        for (path, clean) in [
            ("/tmp/a", "/tmp/a"),
            ("/tmp/../etc/x", "/etc/x"),
            ("/tmp/./../etc", "/etc"),
            ("//tmp/../etc", "/etc"),
            ("/tmp/a/../b", "/tmp/b"),
            ("/tmp//a///b/", "/tmp/a/b"),
            ("/../../etc", "/etc"),
            ("/", "/"),
            ("//", "/"),
            ("/..", "/"),
            ("/tmp/", "/tmp"),
            ("a/./b/../c", "a/c"),
            ("a/..", "."),
            ("", "."),
            ("./", "."),
            ("a\\..\\b", "a\\..\\b"),
        ] {
            assert_eq!(clean_path(path).as_deref(), Ok(clean), "{path:?}");
        }
    }

    #[test]
    fn a_nul_byte_or_a_relative_escape_has_no_normal_form() {
        let nul = clean_path("/etc/passwd\0/../../tmp/x").unwrap_err();
        assert_eq!(nul, "the path holds a NUL byte");
        for escape in ["..", "../x", "a/../../x", "./.."] {
            let why = clean_path(escape).unwrap_err();
            assert!(why.contains("climbs above its start"), "{escape:?}: {why}");
        }
    }

    /// Paths from the characters that matter, NUL aside.
    fn paths() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("/"),
                Just("."),
                Just(".."),
                Just("a"),
                Just("b"),
                Just("\\")
            ],
            0..16,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn clean_paths_are_normal_and_cleaning_them_again_changes_nothing(path in paths()) {
            let Ok(clean) = clean_path(&path) else {
                // Only a relative path can fail here: it climbs above its start.
                prop_assert!(!path.starts_with('/'));
                return Ok(());
            };
            for bad in ["//", "/./", "/../"] {
                prop_assert!(!clean.contains(bad), "{:?} -> {:?}", path, clean);
            }
            prop_assert!(!clean.ends_with("/.") && !clean.ends_with("/.."), "{:?}", clean);
            prop_assert!(clean == "/" || !clean.ends_with('/'), "{:?}", clean);
            prop_assert!(clean == "." || !clean.starts_with("./"), "{:?}", clean);
            prop_assert!(clean != ".." && !clean.starts_with("../"), "{:?}", clean);
            prop_assert_eq!(clean.starts_with('/'), path.starts_with('/'));
            prop_assert!(clean.len() <= path.len().max(1));
            prop_assert_eq!(clean_path(&clean), Ok(clean.clone()));
        }

        #[test]
        fn an_absolute_path_always_has_a_normal_form(path in paths()) {
            let absolute = format!("/{path}");
            prop_assert!(clean_path(&absolute).is_ok());
        }
    }
}
