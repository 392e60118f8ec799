//! Who the caller is, from the apiserver's point of view (SelfSubjectReview).

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Client;
use kube::api::{Api, PostParams};

use super::error::CommandError;

/// The caller's username, as admission will see it (`request.userInfo.username`).
pub async fn username(client: &Client) -> Result<String, CommandError> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = match api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(review) => review,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Err(CommandError::Identity(
                "the apiserver does not serve authentication.k8s.io/v1 selfsubjectreviews \
                 (Kubernetes 1.28+ needed)"
                    .into(),
            ));
        }
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Err(CommandError::Identity(format!(
                "{}; creating selfsubjectreviews.authentication.k8s.io is normally allowed to every \
                 authenticated user by the system:basic-user ClusterRole",
                status.message
            )));
        }
        Err(e) => return Err(e.into()),
    };
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| CommandError::Identity("the SelfSubjectReview carried no username".into()))
}
