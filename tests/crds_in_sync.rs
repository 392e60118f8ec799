//! crds/ must be exactly what `hitl-operator crds` generates from the Rust types.

use std::path::Path;

use hitl_operator::cli::crds::crd_files;

#[test]
fn checked_in_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let expected = crd_files();
    for (file, yaml) in &expected {
        let on_disk = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("crds/{file}: {e}; run `make crds`"));
        assert!(
            on_disk == *yaml,
            "crds/{file} is out of date with src/api; run `make crds`"
        );
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("crds/ exists")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut names: Vec<String> = expected.into_iter().map(|(file, _)| file).collect();
    names.sort();
    assert_eq!(files, names, "crds/ holds files no type generates");
}

#[test]
fn crds_are_structural_and_document_every_field() {
    for (file, yaml) in crd_files() {
        let crd: serde_json::Value =
            serde_saphyr::from_str(yaml.trim_start_matches("---\n")).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut missing = Vec::new();
        walk(schema, "", &mut missing);
        assert!(missing.is_empty(), "{file}: {missing:#?}");
    }
}

/// Structural-schema rules the apiserver enforces, and `kubectl explain` usefulness: every
/// node has a type (or is int-or-string / preserve-unknown-fields), no `additionalProperties`
/// next to `properties`, no bare `additionalProperties: true`, and every property of our own
/// types has a description.
fn walk(schema: &serde_json::Value, path: &str, problems: &mut Vec<String>) {
    let int_or_string = schema.get("x-kubernetes-int-or-string").is_some();
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields").is_some();
    if schema.get("type").is_none() && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    if schema.get("properties").is_some() && schema.get("additionalProperties").is_some() {
        problems.push(format!("{path}: properties and additionalProperties"));
    }
    if schema.get("additionalProperties") == Some(&serde_json::Value::Bool(true)) {
        problems.push(format!("{path}: additionalProperties: true"));
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = schema.get(keyword).and_then(|v| v.as_array()) {
            for branch in branches {
                if branch.get("type").is_some() && !int_or_string {
                    problems.push(format!("{path}: {keyword} branch sets a type"));
                }
            }
        }
    }
    if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            let ours = !path.contains("deployment.") || path.ends_with("deployment");
            if ours && property.get("description").is_none() && path.starts_with(".spec") {
                problems.push(format!("{child}: no description"));
            }
            walk(property, &child, problems);
        }
    }
    if let Some(items) = schema.get("items") {
        walk(items, &format!("{path}[]"), problems);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        walk(additional, &format!("{path}{{}}"), problems);
    }
}
