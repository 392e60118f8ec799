//! The Helm chart's `crds/` hold `hitl-operator crds` split into one file per CRD
//! (`<name>.yaml`, each starting with `---`), so `cat charts/hitl-operator/crds/*.yaml` prints
//! exactly what the command prints. `HITL_BLESS=1 cargo test --test chart_crds` rewrites them.

use std::path::Path;

use hitl_operator::{api, cli::crds::crds_yaml};
use kube::ResourceExt;

#[test]
fn chart_crds_equal_the_generated_crds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/hitl-operator/crds");
    let expected: Vec<(String, String)> = api::crds()
        .iter()
        .map(|crd| {
            let yaml = serde_saphyr::to_string(crd).expect("CRDs serialize");
            (format!("{}.yaml", crd.name_any()), format!("---\n{yaml}"))
        })
        .collect();
    let joined: String = expected.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(
        joined,
        crds_yaml(),
        "per-file split must equal `hitl-operator crds`"
    );

    if std::env::var("HITL_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in &expected {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    let mut actual: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    actual.sort();
    let mut names: Vec<String> = expected.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(
        actual, names,
        "charts/hitl-operator/crds holds exactly one file per CRD"
    );
    for (name, text) in &expected {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            on_disk == *text,
            "charts/hitl-operator/crds/{name} is stale: run HITL_BLESS=1 cargo test --test chart_crds"
        );
    }
}
