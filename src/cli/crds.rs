//! `hitl-operator crds`: print every CRD as multi-document YAML (the source of `crds/`).

use crate::api;

/// The CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> String {
    api::crds()
        .iter()
        .map(|crd| {
            let yaml = serde_saphyr::to_string(crd).expect("CRDs serialize to YAML");
            format!("---\n{yaml}")
        })
        .collect()
}
