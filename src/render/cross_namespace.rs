//! Whether an Agent may reference an object in another namespace: kagent's handshake. The
//! referenced object opts in with `spec.allowedNamespaces`; without it only its own namespace
//! may use it, so nobody borrows another team's tool server, and its credentials, unasked.

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};

use crate::api::common::{AllowedNamespaces, FromNamespaces};

/// The answer for one reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The reference may be used.
    Allowed,
    /// The target does not allow references from the source namespace.
    Refused,
    /// The target allows namespaces by label; the source namespace's labels are needed.
    NeedsLabels,
    /// The target's selector cannot be evaluated (an unknown operator, say).
    BadSelector(String),
}

/// Whether `allowed` (the target's `spec.allowedNamespaces`) lets an object in `source`
/// reference the target in `target`. `source_labels` are the labels of the source namespace,
/// when known.
pub fn verdict(
    allowed: Option<&AllowedNamespaces>,
    source: &str,
    target: &str,
    source_labels: Option<&BTreeMap<String, String>>,
) -> Verdict {
    if source == target {
        return Verdict::Allowed;
    }
    let Some(allowed) = allowed else {
        return Verdict::Refused;
    };
    match allowed.from {
        FromNamespaces::All => Verdict::Allowed,
        FromNamespaces::Same => Verdict::Refused,
        FromNamespaces::Selector => {
            let Some(selector) = allowed.selector.clone() else {
                return Verdict::BadSelector(
                    "selector must be specified when from is Selector".into(),
                );
            };
            let selector = match Selector::try_from(selector) {
                Ok(selector) => selector,
                Err(e) => return Verdict::BadSelector(e.to_string()),
            };
            match source_labels {
                None => Verdict::NeedsLabels,
                Some(labels) if selector.matches(labels) => Verdict::Allowed,
                Some(_) => Verdict::Refused,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(yaml: &str) -> AllowedNamespaces {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_same_namespace_is_always_allowed_and_others_only_when_the_target_says_so() {
        assert_eq!(verdict(None, "a", "a", None), Verdict::Allowed);
        assert_eq!(verdict(None, "a", "b", None), Verdict::Refused);
        let same = allowed("{}");
        assert_eq!(verdict(Some(&same), "a", "b", None), Verdict::Refused);
        let all = allowed("{from: All}");
        assert_eq!(verdict(Some(&all), "a", "b", None), Verdict::Allowed);
    }

    #[test]
    fn a_selector_matches_the_source_namespace_labels() {
        let by_label = allowed(
            "{from: Selector, selector: {matchLabels: {team: tools}, matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}}",
        );
        assert_eq!(
            verdict(Some(&by_label), "a", "b", None),
            Verdict::NeedsLabels
        );
        let matching = labels(&[("team", "tools"), ("env", "dev")]);
        assert_eq!(
            verdict(Some(&by_label), "a", "b", Some(&matching)),
            Verdict::Allowed
        );
        let other = labels(&[("team", "tools"), ("env", "prod")]);
        assert_eq!(
            verdict(Some(&by_label), "a", "b", Some(&other)),
            Verdict::Refused
        );
        let missing = allowed("{from: Selector}");
        assert!(matches!(
            verdict(Some(&missing), "a", "b", Some(&matching)),
            Verdict::BadSelector(_)
        ));
    }
}
