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
    use crate::api::approval_grant::{ApprovalGrant, ApprovalGrantStatus};
    use hitl_test_kit::mock::{self, ApiMock};
    use serde_json::{Value, json};

    const GRANT: &str = "/apis/kagent.dev/v1alpha2/namespaces/ns/approvalgrants/g";

    fn grant(resource_version: &str, uses: i32) -> Value {
        json!({"apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrant",
               "metadata": {"name": "g", "namespace": "ns", "resourceVersion": resource_version},
               "spec": {"agentRef": {"name": "a"}, "toolServer": {"kind": "RemoteMCPServer", "name": "s", "namespace": "ns"},
                        "expiresAt": "2026-11-22T01:00:00Z", "reason": "r", "grantedBy": "alice"},
               "status": {"uses": uses}})
    }

    /// Uses up to `max`: one more use, declined at `max`.
    fn one_more(max: u32) -> impl FnMut(&ApprovalGrant) -> Result<ApprovalGrantStatus, u32> {
        move |g: &ApprovalGrant| {
            let uses = g.uses();
            if uses >= max {
                return Err(uses);
            }
            Ok(ApprovalGrantStatus {
                uses: Some(i32::try_from(uses + 1).unwrap()),
                ..Default::default()
            })
        }
    }

    fn api() -> (Api<ApprovalGrant>, ApiMock) {
        let (client, handle) = mock::pair("ns");
        (Api::namespaced(client, "ns"), handle)
    }

    #[tokio::test]
    async fn a_conflict_is_read_again_and_judged_again() {
        let (api, mut handle) = api();
        let first: ApprovalGrant = serde_json::from_value(grant("1", 0)).unwrap();
        let task = tokio::spawn(async move {
            GuardedWrite::status(&api, "m", 3)
                .write(first, one_more(2))
                .await
                .unwrap()
        });
        let (m, uri, body, send) = handle.next().await.parts();
        assert_eq!(
            (m.as_str(), uri.as_str()),
            ("PATCH", &format!("{GRANT}/status?&fieldManager=m")[..])
        );
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "1"}, "status": {"uses": 1}})
        );
        send.respond(409,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}),
        );
        // Someone else used it meanwhile: judged on what it is now.
        let (m, uri, _, send) = handle.next().await.parts();
        assert_eq!((m.as_str(), uri.as_str()), ("GET", GRANT));
        send.respond(200, &grant("2", 1));
        let (_, _, body, send) = handle.next().await.parts();
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "2"}, "status": {"uses": 2}})
        );
        send.respond(409,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}),
        );
        let (_, _, _, send) = handle.next().await.parts();
        send.respond(200, &grant("3", 2));
        let outcome = task.await.unwrap();
        assert!(
            matches!(outcome.guarded, Guarded::Declined(2)),
            "{outcome:?}"
        );
        assert_eq!(outcome.conflicts, 2);
    }

    #[tokio::test]
    async fn gone_and_unguardable_objects_are_never_written() {
        let (api, mut handle) = api();
        let mut unread: ApprovalGrant = serde_json::from_value(grant("1", 0)).unwrap();
        unread.metadata.resource_version = None;
        let task = tokio::spawn(async move {
            GuardedWrite::status(&api, "m", 3)
                .write(unread, one_more(5))
                .await
                .unwrap()
        });
        // Without a resourceVersion it reads the object first; it is gone.
        let (m, uri, _, send) = handle.next().await.parts();
        assert_eq!((m.as_str(), uri.as_str()), ("GET", GRANT));
        send.respond(404,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
        );
        assert!(matches!(task.await.unwrap().guarded, Guarded::Gone));
    }

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
