//! RemoteMCPServer reconciler: lists the server's tools over MCP and records them in
//! `status.discoveredTools` with an `Accepted` condition, and whether each has the definition
//! `spec.acceptedToolDefinitions` accepted in a `ToolDefinitionsAccepted` condition. Re-lists
//! every five minutes, and sooner with backoff after a failure.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::watches::RemoteMcpServerWatches;
use super::{Context, discovery, drain, fetch_value_source, measured, retry_after_error};
use crate::api::RemoteMCPServer;
use crate::api::common::AcceptedToolDefinition;
use crate::api::common::{ValueSourceType, parse_duration_seconds};
use crate::api::remote_mcp_server::{DiscoveredTool, RemoteMCPServerStatus};
use crate::apiserver::conditions::find;
use crate::apiserver::{apply_status, new_condition, set_condition};
use crate::render::refs::RefStore;
use crate::{Error, Result, egress};

/// Name of this controller in metrics.
pub const CONTROLLER: &str = "remotemcpserver";
/// How often the tools of a healthy server are listed again.
pub const RELIST_INTERVAL: Duration = Duration::from_secs(300);
/// First retry delay after a failed listing; it doubles up to [`RELIST_INTERVAL`].
const DISCOVERY_RETRY_BASE: Duration = Duration::from_secs(10);
/// Timeout of one listing when the server sets none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The RemoteMCPServer controller on `watches`, until `shutdown` resolves.
pub fn controller(
    watches: RemoteMcpServerWatches,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> {
    let RemoteMcpServerWatches {
        servers,
        secrets,
        config_maps,
    } = watches;
    let servers_store = ctx.stores.remote_mcp_servers.clone();
    let (for_secrets, for_config_maps) = (servers_store.clone(), servers_store.clone());
    let controller = Controller::for_shared_stream(servers, servers_store)
        .watches_stream(secrets, move |secret: PartialObjectMeta<Secret>| {
            using_source(
                &for_secrets,
                ValueSourceType::Secret,
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            )
        })
        .watches_stream(
            config_maps,
            move |config_map: PartialObjectMeta<ConfigMap>| {
                using_source(
                    &for_config_maps,
                    ValueSourceType::ConfigMap,
                    &config_map.namespace().unwrap_or_default(),
                    &config_map.name_any(),
                )
            },
        )
        .graceful_shutdown_on(shutdown);
    drain(controller.run(
        reconcile,
        |object, error, ctx| retry_after_error(CONTROLLER, object.as_ref(), error, &ctx),
        ctx,
    ))
}

/// Reconciles one RemoteMCPServer.
pub async fn reconcile(server: Arc<RemoteMCPServer>, ctx: Arc<Context>) -> Result<Action> {
    measured(
        &ctx,
        CONTROLLER,
        server.as_ref(),
        reconcile_inner(&server, &ctx),
    )
    .await
}

async fn reconcile_inner(server: &RemoteMCPServer, ctx: &Context) -> Result<Action> {
    let namespace = server.namespace().unwrap_or_default();
    let id = format!("{namespace}/{}", server.name_any());
    let outcome = match resolve_headers(server, ctx, &namespace).await {
        Ok(headers) => {
            let timeout = server
                .spec
                .timeout
                .as_deref()
                .and_then(parse_duration_seconds)
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
            discovery::list_tools(
                &ctx.http,
                &egress::as_namespace_pods_reach(&server.spec.url, &namespace),
                server.spec.protocol.unwrap_or_default(),
                &headers,
                timeout,
            )
            .await
            .map_err(|message| Error::ToolDiscovery {
                server: format!("RemoteMCPServer {id}"),
                message,
            })
        }
        Err(error) => Err(error),
    };

    let current = server.status.clone().unwrap_or_default();
    let generation = server.meta().generation;
    let now = ctx.clock.now();
    let mut status = RemoteMCPServerStatus {
        observed_generation: generation,
        conditions: current.conditions.clone(),
        // After a failure the last listing stays: agents keep their view of the server.
        discovered_tools: current.discovered_tools.clone(),
    };
    let action = match &outcome {
        Ok(tools) => {
            status.discovered_tools = tools.clone();
            let message = format!("{} tools discovered", tools.len());
            set_condition(
                &mut status.conditions,
                new_condition("Accepted", true, "Reconciled", message, generation, now),
            );
            let (state, reason, message) =
                definitions_accepted(server, &server.spec.accepted_tool_definitions, tools);
            let mut condition = new_condition(
                DEFINITIONS_ACCEPTED,
                state == Some(true),
                reason,
                message,
                generation,
                now,
            );
            if state.is_none() {
                condition.status = "Unknown".into();
            }
            set_condition(&mut status.conditions, condition);
            ctx.discovery_failures.succeeded(&id);
            Action::requeue(RELIST_INTERVAL)
        }
        Err(error) => {
            set_condition(
                &mut status.conditions,
                new_condition(
                    "Accepted",
                    false,
                    error.reason(),
                    error.to_string(),
                    generation,
                    now,
                ),
            );
            Action::requeue(ctx.discovery_failures.failed(
                &id,
                DISCOVERY_RETRY_BASE,
                RELIST_INTERVAL,
            ))
        }
    };
    if status != current {
        let api: Api<RemoteMCPServer> = Api::namespaced(ctx.client.clone(), &namespace);
        apply_status(&api, server, &status).await?;
        announce(ctx, server, &current, &status).await;
    }
    Ok(action)
}

/// Type of the condition saying whether every listed tool has its accepted definition.
pub const DEFINITIONS_ACCEPTED: &str = "ToolDefinitionsAccepted";

/// The `ToolDefinitionsAccepted` condition of `server`, whose object accepted `accepted`, for
/// the tools it listed: its status (`None`: Unknown, nothing accepted), reason and message.
fn definitions_accepted(
    server: &RemoteMCPServer,
    accepted: &[AcceptedToolDefinition],
    tools: &[DiscoveredTool],
) -> (Option<bool>, &'static str, String) {
    let how = format!(
        "kubectl hitl accept-tools remotemcpserver/{} -n {}",
        server.name_any(),
        server.namespace().unwrap_or_default()
    );
    if accepted.is_empty() {
        return (
            None,
            "NoneAccepted",
            format!(
                "no tool definitions accepted: each gate accepts the definitions it lists first, until it restarts; to pin these, review status.discoveredTools and run `{how}`"
            ),
        );
    }
    let unaccepted: Vec<String> = tools
        .iter()
        .filter_map(|tool| {
            let pinned = accepted.iter().find(|a| a.name == tool.name);
            let listed = tool.definition_sha256.as_deref();
            match pinned {
                Some(pinned) if Some(pinned.definition_sha256.as_str()) == listed => None,
                Some(pinned) => Some(format!(
                    "{} (accepted sha256 {}, listed {})",
                    tool.name,
                    short(&pinned.definition_sha256),
                    listed.map_or("none", short)
                )),
                None => Some(format!("{} (never accepted)", tool.name)),
            }
        })
        .collect();
    if unaccepted.is_empty() {
        return (
            Some(true),
            "Accepted",
            format!(
                "every listed tool has its accepted definition ({} tools)",
                tools.len()
            ),
        );
    }
    (
        Some(false),
        "DefinitionChanged",
        format!(
            "listed with a definition not accepted, so every call of them waits for an approval: {}; review status.discoveredTools, then accept with `{how}`",
            unaccepted.join(", ")
        ),
    )
}

/// The first 12 hex digits of a digest, as approvers see it in messages.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Publishes an Event when the `Accepted` condition turns or its message changes, so a
/// failing server is reported once per distinct failure, not on every retry; and a Warning
/// when the `ToolDefinitionsAccepted` condition turns False or names other tools.
async fn announce(
    ctx: &Context,
    server: &RemoteMCPServer,
    before: &RemoteMCPServerStatus,
    after: &RemoteMCPServerStatus,
) {
    let changed = |type_: &str| {
        let state = |status: &RemoteMCPServerStatus| {
            find(&status.conditions, type_).map(|c| (c.status.clone(), c.message.clone()))
        };
        state(after).filter(|now| state(before).as_ref() != Some(now))
    };
    if let Some((state, message)) = changed("Accepted") {
        let (type_, reason) = if state == "True" {
            (EventType::Normal, "ToolsDiscovered")
        } else {
            (EventType::Warning, "ToolDiscoveryFailed")
        };
        ctx.publish(
            type_,
            reason,
            message,
            "ListTools",
            &[server.object_ref(&())],
        )
        .await;
    }
    if let Some((state, message)) = changed(DEFINITIONS_ACCEPTED)
        && state == "False"
    {
        ctx.publish(
            EventType::Warning,
            "ToolDefinitionChanged",
            message,
            "ListTools",
            &[server.object_ref(&())],
        )
        .await;
    }
}

/// The HTTP headers of `headersFrom`, reading Secret and ConfigMap keys.
async fn resolve_headers(
    server: &RemoteMCPServer,
    ctx: &Context,
    namespace: &str,
) -> Result<BTreeMap<String, String>> {
    let object = format!("RemoteMCPServer {namespace}/{}", server.name_any());
    let mut refs = RefStore::default();
    let mut headers = BTreeMap::new();
    for (index, header) in server.spec.headers_from.iter().enumerate() {
        let value = match (&header.value, &header.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(source)) => {
                fetch_value_source(&ctx.client, source, namespace, &mut refs).await?;
                refs.value(source, namespace).map_err(|missing| {
                    missing.into_error(&object, &format!("spec.headersFrom[{index}]"))
                })?
            }
            // The schema requires one of the two.
            (None, None) => continue,
        };
        headers.insert(header.name.clone(), value);
    }
    Ok(headers)
}

/// The RemoteMCPServers in `store` whose headers read `kind namespace/name`.
pub fn using_source(
    store: &Store<RemoteMCPServer>,
    kind: ValueSourceType,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<RemoteMCPServer>> {
    store
        .state()
        .iter()
        .filter(|server| {
            server.namespace().as_deref() == Some(namespace)
                && server.spec.headers_from.iter().any(|header| {
                    header
                        .value_from
                        .as_ref()
                        .is_some_and(|source| source.source_type == kind && source.name == name)
                })
        })
        .map(|server| ObjectRef::from_obj(server.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    #[test]
    fn header_sources_map_to_the_servers_reading_them() {
        let (store, mut writer) = reflector::store::<RemoteMCPServer>();
        for (name, kind, source) in [("s1", "Secret", "token"), ("s2", "ConfigMap", "token")] {
            let server: RemoteMCPServer = serde_json::from_value(serde_json::json!({
                "apiVersion": "kagent.dev/v1alpha2", "kind": "RemoteMCPServer",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"url": "http://x/mcp", "headersFrom": [
                    {"name": "Authorization", "valueFrom": {"type": kind, "name": source, "key": "k"}}
                ]},
            }))
            .unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(server));
        }
        let names = |kind, namespace| -> Vec<String> {
            using_source(&store, kind, namespace, "token")
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(ValueSourceType::Secret, "ns"), vec!["s1"]);
        assert_eq!(names(ValueSourceType::ConfigMap, "ns"), vec!["s2"]);
        assert!(names(ValueSourceType::Secret, "other").is_empty());
    }
}
