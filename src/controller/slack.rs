//! The Slack interactions endpoint (`--slack-interactions-addr`): a person presses Approve or
//! Deny on a notifier's Slack message; the request is checked ([`crate::notify::slack`]), the
//! Slack user mapped to a Kubernetes user by the cluster admin's mapping, and the decision
//! written exactly as `kubectl hitl approve|deny` writes it, by **impersonating** that user.
//! So the apiserver's RBAC (the verb `approve` on the agent) and the admission policies judge
//! it as if the person had run the command. Every replica serves it; nothing here needs the
//! Lease (a decision is write-once, so a request taken twice changes nothing the second time).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use serde_json::json;

use super::ControllerArgs;
use crate::api::ApprovalRequest;
use crate::api::approval_request::DecisionType;
use crate::decide::{self, Outcome};
use crate::notify::slack::{self, Interaction, Mapping, Verifier};
use crate::{Error, Result};

/// Path Slack posts interactions to (the app's Interactivity Request URL).
pub const PATH: &str = "/slack/interactions";

/// What the endpoint needs.
pub struct Endpoint {
    /// Checks signatures, age and replays.
    pub verifier: Verifier,
    /// Slack user ID to Kubernetes identity.
    pub mapping: Mapping,
    /// The controller's own client configuration; each decision impersonates from it.
    pub config: kube::Config,
    /// For replies to Slack's `response_url`.
    pub http: reqwest::Client,
    /// Replies go only to `response_url`s starting with this (Slack's own by default).
    pub response_url_prefix: String,
}

/// Starts the Slack interactions endpoint when `--slack-interactions-addr` is set: reads the
/// signing secret and the user mapping (a startup error when either is missing or invalid).
pub(super) async fn serve(args: &ControllerArgs) -> Result<()> {
    let (Some(addr), Some(secret_file), Some(users_file)) = (
        args.slack_interactions_addr,
        &args.slack_signing_secret_file,
        &args.slack_users_file,
    ) else {
        return Ok(());
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })
    };
    let secret = read(secret_file)?;
    let mapping = slack::mapping(&read(users_file)?).map_err(|message| Error::Yaml {
        file: users_file.display().to_string(),
        message,
    })?;
    let endpoint = Endpoint {
        verifier: Verifier::new(secret.trim().as_bytes()),
        mapping,
        config: kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
        http: crate::egress::client(),
        response_url_prefix: args.slack_response_url_prefix.clone(),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind {
            addr: addr.to_string(),
            source,
        })?;
    tracing::info!(%addr, users = endpoint.mapping.len(), "serving Slack interactions at {}", PATH);
    let server = axum::serve(listener, router(Arc::new(endpoint)));
    tokio::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "Slack interactions server stopped");
        }
    });
    Ok(())
}

/// The router serving [`PATH`].
pub fn router(endpoint: Arc<Endpoint>) -> Router {
    Router::new()
        .route(PATH, post(interaction))
        .with_state(endpoint)
}

async fn interaction(
    State(endpoint): State<Arc<Endpoint>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let checked = endpoint.verifier.verify(
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        Timestamp::now(),
    );
    if let Err(rejection) = checked {
        tracing::warn!(reason = rejection.describe(), "Slack interaction refused");
        return (StatusCode::UNAUTHORIZED, rejection.describe()).into_response();
    }
    let interaction = match slack::parse(&body) {
        Ok(interaction) => interaction,
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    let text = decide_as_mapped(&endpoint, &interaction).await;
    tracing::info!(slack_user = %interaction.slack_user, namespace = %interaction.namespace, name = %interaction.name, %text, "Slack interaction");
    let reply = json!({"response_type": "ephemeral", "replace_original": false, "text": text});
    if let Some(url) = interaction
        .response_url
        .as_deref()
        .filter(|url| url.starts_with(&endpoint.response_url_prefix))
    {
        let sent = endpoint.http.post(url).json(&reply).send().await;
        if let Err(error) = sent.and_then(|r| r.error_for_status()) {
            tracing::warn!(error = %error.without_url(), "reply to Slack failed");
        }
    }
    axum::Json(reply).into_response()
}

/// Writes the decision as the person the Slack user maps to; what to tell them.
async fn decide_as_mapped(endpoint: &Endpoint, interaction: &Interaction) -> String {
    let Some(person) = endpoint.mapping.get(&interaction.slack_user) else {
        return format!(
            "Nothing was decided: Slack user {} is not mapped to a Kubernetes user. Ask the \
             cluster admin to add you to the operator's Slack user mapping, or use `kubectl hitl`.",
            interaction.slack_user
        );
    };
    let mut config = endpoint.config.clone();
    config.auth_info.impersonate = Some(person.user.clone());
    config.auth_info.impersonate_groups =
        (!person.groups.is_empty()).then(|| person.groups.clone());
    let client = match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(error) => return format!("Nothing was decided: {error}"),
    };
    let verb = match interaction.decision {
        DecisionType::Approve => "approved",
        DecisionType::Deny => "denied",
    };
    let request = decide::Request {
        decision_type: interaction.decision,
        reason: Some(format!("{verb} in Slack by @{}", interaction.slack_name)),
        user: person.user.clone(),
        edit: None,
    };
    let api: Api<ApprovalRequest> = Api::namespaced(client, &interaction.namespace);
    let names = [interaction.name.clone()];
    match decide::decide_names(&api, &names, &request, Timestamp::now()).await {
        Ok(outcomes) => outcomes
            .first()
            .map(|o: &Outcome| o.describe(&interaction.namespace, &person.user))
            .unwrap_or_default(),
        Err(error) => format!("Nothing was decided: {error}"),
    }
}
