//! Reading Kubernetes manifests from files and directories (multi-document YAML or JSON).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Error, Result};

/// One object read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The file it came from.
    pub file: String,
    /// The object.
    pub value: Value,
}

impl Document {
    /// `kind` of the object.
    pub fn kind(&self) -> &str {
        self.value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// `apiVersion` of the object.
    pub fn api_version(&self) -> &str {
        self.value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Manifest files under `path`: the file itself, or the .yaml/.yml/.json files of a directory
/// (and of its subdirectories when `recursive`, as with kubectl's `-R`), sorted so output is
/// stable.
fn manifest_files(path: &Path, recursive: bool) -> Result<Vec<PathBuf>> {
    let io_error = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(io_error)?;
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(io_error)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .map_err(io_error)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                files.extend(manifest_files(&entry, recursive)?);
            }
        } else if is_manifest(&entry) {
            files.push(entry);
        }
    }
    Ok(files)
}

/// Parses one file's documents; `List` objects are flattened into their items.
pub fn parse_documents(file: &str, text: &str) -> Result<Vec<Document>> {
    let values: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|error| Error::Yaml {
        file: file.to_owned(),
        message: error.to_string(),
    })?;
    let mut documents = Vec::new();
    for value in values {
        if value.is_null() {
            continue;
        }
        let items = value
            .get("kind")
            .and_then(Value::as_str)
            .filter(|kind| kind.ends_with("List"))
            .and_then(|_| value.get("items"))
            .and_then(Value::as_array)
            .cloned();
        match items {
            Some(items) => documents.extend(items.into_iter().map(|value| Document {
                file: file.to_owned(),
                value,
            })),
            None => documents.push(Document {
                file: file.to_owned(),
                value,
            }),
        }
    }
    Ok(documents)
}

/// Reads every document of every manifest file under `paths`.
pub fn load(paths: &[PathBuf], recursive: bool) -> Result<Vec<Document>> {
    let mut documents = Vec::new();
    for path in paths {
        for file in manifest_files(path, recursive)? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|source| Error::Io {
                path: name.clone(),
                source,
            })?;
            documents.extend(parse_documents(&name, &text)?);
        }
    }
    Ok(documents)
}
