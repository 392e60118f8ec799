//! `hitl-operator crds`: print every CRD as YAML, or write one file per CRD (the source of
//! `crds/`).

use std::path::{Path, PathBuf};

use crate::api;
use crate::{Error, Result};

/// Arguments of `crds`.
#[derive(Clone, Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write `<name>.yaml` per CRD into this directory instead of printing them.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
}

/// Each CRD as `(file name, YAML)`, in a stable order.
pub fn crd_files() -> Vec<(String, String)> {
    api::crds()
        .iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(crd).expect("CRDs serialize to YAML");
            (format!("{name}.yaml"), format!("---\n{yaml}"))
        })
        .collect()
}

/// The CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> String {
    crd_files().into_iter().map(|(_, yaml)| yaml).collect()
}

/// Writes one file per CRD into `dir`.
pub fn write_crds(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.display().to_string(),
        source,
    })?;
    for (file, yaml) in crd_files() {
        let path = dir.join(file);
        std::fs::write(&path, yaml).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(())
}
