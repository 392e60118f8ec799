//! The one guarded write of the operator: a typed change to an object's status (or to a part of
//! its spec), sent as a merge patch that holds only against the resourceVersion the change was
//! computed from. Every writer of a status field that others write too (the gate consuming an
//! approval or using a grant, the notifier's records and counts, `kubectl hitl` deciding or
//! revoking) goes through it, so none can forget the guard: a 409 Conflict means the object
//! moved on, and the change is asked again of the object as it now is.
//!
//! The change is a value of the API's own types (`ApprovalRequestStatus`, a partial spec, …),
//! whose unset fields are left out of the patch, so a renamed field breaks the build, not the
//! write. What the CRDs guarantee (write-once, never decreasing) holds whoever writes and
//! however; the guard is what makes a read-judge-write sequence of ours exactly once.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Which part of the object a guarded write changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `status`, through the status subresource.
    Status,
    /// `spec`, through the object itself.
    Spec,
}

impl Part {
    fn key(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Spec => "spec",
        }
    }
}

/// What a guarded write came to.
#[derive(Debug)]
pub enum Guarded<K, D> {
    /// Written: the object as the apiserver stored it.
    Written(K),
    /// The change declined the object as it then was, saying why.
    Declined(D),
    /// The object is gone.
    Gone,
    /// The object changed under every attempt (or came without a resourceVersion).
    Contended,
}

/// A guarded write's outcome and how many 409 Conflicts it met on the way.
#[derive(Debug)]
pub struct Outcome<K, D> {
    /// What the write came to.
    pub guarded: Guarded<K, D>,
    /// Conflicts met (each followed by a fresh read).
    pub conflicts: u32,
}

/// A guarded write of one part of objects of one kind, under one field manager.
pub struct GuardedWrite<'a, K> {
    api: &'a Api<K>,
    field_manager: &'a str,
    part: Part,
    attempts: u32,
}

impl<'a, K> GuardedWrite<'a, K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    /// Writes to the status subresource, sending at most `attempts` writes.
    pub fn status(api: &'a Api<K>, field_manager: &'a str, attempts: u32) -> Self {
        Self {
            api,
            field_manager,
            part: Part::Status,
            attempts,
        }
    }

    /// Writes to the spec, sending at most `attempts` writes.
    pub fn spec(api: &'a Api<K>, field_manager: &'a str, attempts: u32) -> Self {
        Self {
            api,
            field_manager,
            part: Part::Spec,
            attempts,
        }
    }

    /// Asks `change` what to write onto `current` and writes it over `current`'s
    /// resourceVersion; after a 409 Conflict reads the object again and asks again, until the
    /// attempts given are spent (then `Contended`, without a further read). `change` returns `Err` to write nothing (the object as it is no longer
    /// calls for the change). Errors other than a conflict or a missing object are returned.
    pub async fn write<P, D>(
        &self,
        mut current: K,
        mut change: impl FnMut(&K) -> Result<P, D>,
    ) -> kube::Result<Outcome<K, D>>
    where
        P: Serialize,
    {
        let name = current.name_any();
        let params = PatchParams {
            field_manager: Some(self.field_manager.to_owned()),
            ..PatchParams::default()
        };
        let mut conflicts = 0;
        let guarded = loop {
            let Some(resource_version) = current.meta().resource_version.clone() else {
                // Never written unguarded: an object without a resourceVersion is read afresh.
                match self.api.get_opt(&name).await? {
                    Some(fresh) if fresh.meta().resource_version.is_some() => current = fresh,
                    Some(_) => break Guarded::Contended,
                    None => break Guarded::Gone,
                }
                continue;
            };
            let part = match change(&current) {
                Ok(part) => part,
                Err(why) => break Guarded::Declined(why),
            };
            let patch = guarded_patch(&resource_version, self.part, &part)
                .map_err(kube::Error::SerdeError)?;
            let sent = match self.part {
                Part::Status => {
                    self.api
                        .patch_status(&name, &params, &Patch::Merge(&patch))
                        .await
                }
                Part::Spec => self.api.patch(&name, &params, &Patch::Merge(&patch)).await,
            };
            match sent {
                Ok(written) => break Guarded::Written(written),
                Err(kube::Error::Api(status)) if status.is_conflict() => {
                    conflicts += 1;
                    if conflicts >= self.attempts {
                        break Guarded::Contended;
                    }
                    match self.api.get_opt(&name).await? {
                        Some(fresh) => current = fresh,
                        None => break Guarded::Gone,
                    }
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => break Guarded::Gone,
                Err(e) => return Err(e),
            }
        };
        Ok(Outcome { guarded, conflicts })
    }
}

/// `{"metadata": {"resourceVersion": …}, "<part>": …}`: the merge patch of a guarded write.
fn guarded_patch(
    resource_version: &str,
    part: Part,
    value: &impl Serialize,
) -> serde_json::Result<serde_json::Value> {
    let mut patch = serde_json::json!({"metadata": {"resourceVersion": resource_version}});
    patch[part.key()] = serde_json::to_value(value)?;
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_patch_carries_the_guard_and_only_the_fields_set() {
        let status = crate::api::approval_grant::ApprovalGrantStatus {
            uses: Some(3),
            ..Default::default()
        };
        assert_eq!(
            guarded_patch("42", Part::Status, &status).unwrap(),
            json!({"metadata": {"resourceVersion": "42"}, "status": {"uses": 3}})
        );
    }
}
