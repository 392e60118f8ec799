//! The Helm chart's `files/crds/` are `hitl-operator crds --output-dir charts/hitl-operator/files/crds`:
//! byte-for-byte the generated CRDs (and so equal to `crds/`). `templates/crds.yaml` installs and
//! upgrades them with the release unless `crds.install=false`, and keeps them on uninstall.
//! `HITL_BLESS=1 cargo test --test chart_crds` rewrites them.

use std::path::Path;

use hitl_operator::cli::crds::{crd_files, write_crds};

#[test]
fn chart_crds_equal_the_generated_crds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/hitl-operator/files/crds");
    if std::env::var("HITL_BLESS").as_deref() == Ok("1") {
        write_crds(&dir).unwrap();
    }
    let expected = crd_files();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = expected.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(
        on_disk, names,
        "charts/hitl-operator/files/crds holds exactly one file per CRD"
    );
    for (name, yaml) in &expected {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(
            text == *yaml,
            "charts/hitl-operator/files/crds/{name} is stale: run `make chart-bless` \
             (or HITL_BLESS=1 cargo test --test chart_crds)"
        );
    }
}
