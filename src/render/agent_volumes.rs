//! The Agent's own volumes and mounts (`spec.declarative.deployment.volumes`, `volumeMounts`)
//! against the approval gate's ([`objects::GateOwner::gate_volumes`]): gate.json with the tool servers'
//! credentials, the binding key and the gate's ServiceAccount token are for the gate container
//! alone. A volume reaches one of the gate's when it is that volume (its name, in the pod the
//! gate runs in), when it carries the same Secret, or, in pods that run as the gate's
//! ServiceAccount, when it carries a ServiceAccount token (the gate's credential then).
//!
//! [`check`] refuses an Agent whose volumes or mounts would reach one, and [`check_reads`] one
//! whose environment, or whose ModelConfigs' Secrets, would read a gate Secret; the `GateIsolated`
//! verdict ([`super::isolation`]) applies [`reach`] to the rendered pods as well, so that a pod
//! that got past the check could not be reported isolated.

use k8s_openapi::api::core::v1::{EnvVar, KeyToPath, Volume};

use crate::api::{Agent, GatePlacement};
use crate::render::model::RenderedModel;
use crate::render::objects;
use crate::{Error, Result};

const FIELD: &str = "spec.declarative.deployment";

/// How a volume of the agent's pods reaches one of the gate's volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// It is the gate's volume: the same name in the same pod.
    Name,
    /// It carries the Secret (named) that the gate's volume carries.
    Secret(String),
    /// It carries a ServiceAccount token, and the pods run as the gate's ServiceAccount.
    Token,
}

/// What the agent's pods share with the gate's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharing {
    /// The gate runs in the agent's pods (Sidecar placement): a volume name means the same
    /// volume for both containers.
    pub same_pod: bool,
    /// The agent's pods run as the gate's ServiceAccount: any token projected into them is the
    /// gate's credential.
    pub same_identity: bool,
}

/// Something a volume carries that a gate volume may: keys of a Secret, or a ServiceAccount
/// token.
enum Carried<'v> {
    /// The Secret's name, and the keys projected (`None`: all of them).
    Secret(&'v str, Option<Vec<&'v str>>),
    /// A ServiceAccount token of the pod's identity.
    Token,
}

impl Carried<'_> {
    /// Whether `self` holds some of what `gate` holds.
    fn overlaps(&self, gate: &Carried<'_>) -> bool {
        match (self, gate) {
            (Carried::Secret(mine, my_keys), Carried::Secret(theirs, their_keys)) => {
                mine == theirs
                    && match (my_keys, their_keys) {
                        (Some(mine), Some(theirs)) => mine.iter().any(|k| theirs.contains(k)),
                        _ => true,
                    }
            }
            (Carried::Token, Carried::Token) => true,
            _ => false,
        }
    }
}

fn keys(items: Option<&Vec<KeyToPath>>) -> Option<Vec<&str>> {
    items.map(|items| items.iter().map(|item| item.key.as_str()).collect())
}

/// What `volume` carries, each with its field path under the volume: a secret volume's
/// Secret, and a projected volume's Secrets and tokens.
fn carried(volume: &Volume) -> Vec<(String, Carried<'_>)> {
    let mut carried = Vec::new();
    if let Some(secret) = &volume.secret
        && let Some(name) = secret.secret_name.as_deref()
    {
        carried.push((
            "secret.secretName".to_owned(),
            Carried::Secret(name, keys(secret.items.as_ref())),
        ));
    }
    let sources = volume
        .projected
        .iter()
        .flat_map(|projected| projected.sources.iter().flatten());
    for (index, source) in sources.enumerate() {
        if let Some(secret) = &source.secret {
            carried.push((
                format!("projected.sources[{index}].secret.name"),
                Carried::Secret(&secret.name, keys(secret.items.as_ref())),
            ));
        }
        if source.service_account_token.is_some() {
            carried.push((
                format!("projected.sources[{index}].serviceAccountToken"),
                Carried::Token,
            ));
        }
    }
    carried
}

/// Whether `volume`, in the agent's pods, reaches `gate`, a volume the gate container mounts:
/// how, and the field of `volume` that does (`name`, or the source's path). A Secret reaches
/// it when some key the gate's volume projects is projected too (all keys, without `items`).
pub fn reach(volume: &Volume, gate: &Volume, sharing: Sharing) -> Option<(String, Reach)> {
    if sharing.same_pod && volume.name == gate.name {
        return Some(("name".to_owned(), Reach::Name));
    }
    let gate_carries = carried(gate);
    carried(volume).into_iter().find_map(|(field, mine)| {
        let reached = gate_carries.iter().any(|(_, theirs)| mine.overlaps(theirs));
        match mine {
            Carried::Secret(secret, _) if reached => {
                Some((field, Reach::Secret(secret.to_owned())))
            }
            Carried::Token if reached && sharing.same_identity => Some((field, Reach::Token)),
            _ => None,
        }
    })
}

/// What the agent's pods share with the gate's when the gate runs in `placement`.
fn sharing(agent: &Agent, placement: GatePlacement) -> Sharing {
    Sharing {
        same_pod: placement == GatePlacement::Sidecar,
        same_identity: objects::gate_service_account_name(agent, placement)
            == objects::service_account_name(agent),
    }
}

/// Refuses an Agent whose own volumes or volume mounts would give the agent container one of
/// the gate's volumes, when a gate runs (`placement`): a mount or a volume by the name of one
/// in the gate's pod, a volume of the Secret one carries, or a ServiceAccount token in pods
/// running as the gate's ServiceAccount. The error names the Agent (`object`), the field and
/// the gate's volume.
pub fn check(object: &str, agent: &Agent, placement: Option<GatePlacement>) -> Result<()> {
    let Some(placement) = placement else {
        return Ok(());
    };
    let Some(deployment) = agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_deref())
    else {
        return Ok(());
    };
    let forbidden = |field: String, why: String| Error::InvalidSpec {
        object: object.to_owned(),
        field: format!("{FIELD}.{field}"),
        message: format!("Forbidden: {why}; the agent container may not mount it"),
    };
    let gate = objects::GateOwner::agent(agent).gate_volumes();
    let sharing = sharing(agent, placement);
    for (index, volume) in deployment.volumes.iter().enumerate() {
        for theirs in &gate {
            let Some((field, how)) = reach(volume, theirs, sharing) else {
                continue;
            };
            let why = match how {
                Reach::Name => format!("{:?} is the approval gate's volume", theirs.name),
                Reach::Secret(secret) => format!(
                    "Secret {secret:?} is the approval gate's (its volume {:?})",
                    theirs.name
                ),
                Reach::Token => format!(
                    "the pods run as the approval gate's ServiceAccount {:?}, so a token of it is the gate's credential (its volume {:?})",
                    objects::service_account_name(agent),
                    theirs.name
                ),
            };
            return Err(forbidden(format!("volumes[{index}].{field}"), why));
        }
    }
    if sharing.same_pod {
        for (index, mount) in deployment.volume_mounts.iter().enumerate() {
            if gate.iter().any(|theirs| theirs.name == mount.name) {
                return Err(forbidden(
                    format!("volumeMounts[{index}].name"),
                    format!("{:?} is the approval gate's volume", mount.name),
                ));
            }
        }
    }
    Ok(())
}

/// The gate volume that holds `key` of Secret `secret` (every key: `None`), if one does.
fn holding<'g>(gate: &'g [Volume], secret: &str, key: Option<&str>) -> Option<&'g str> {
    let mine = Carried::Secret(secret, key.map(|key| vec![key]));
    gate.iter()
        .find(|theirs| carried(theirs).iter().any(|(_, c)| mine.overlaps(c)))
        .map(|theirs| theirs.name.as_str())
}

/// Refuses what the agent container would read of the gate's Secrets other than through the
/// Agent's own volumes: an environment variable of the Agent's (`deployment.env[].valueFrom.
/// secretKeyRef`), and the Secrets its ModelConfigs bring (`model`: their variables and
/// volumes, named `model_field`, such as a key Secret or a TLS CA Secret that is the Agent's
/// gate Secret).
pub fn check_reads(
    object: &str,
    agent: &Agent,
    placement: Option<GatePlacement>,
    model: &RenderedModel,
    model_field: &str,
) -> Result<()> {
    let Some(placement) = placement else {
        return Ok(());
    };
    let gate = objects::GateOwner::agent(agent).gate_volumes();
    let forbidden = |field: String, secret: &str, key: Option<&str>, volume: &str| {
        let what = key.map_or_else(
            || format!("Secret {secret:?}"),
            |key| format!("key {key:?} of Secret {secret:?}"),
        );
        Error::InvalidSpec {
            object: object.to_owned(),
            field,
            message: format!(
                "Forbidden: {what} is the approval gate's (its volume {volume:?}); the agent container may not read it"
            ),
        }
    };
    let secret_ref = |env: &EnvVar| {
        env.value_from
            .as_ref()
            .and_then(|from| from.secret_key_ref.as_ref())
            .map(|r| (r.name.clone(), r.key.clone()))
    };
    let own_env = agent
        .spec
        .declarative
        .as_ref()
        .and_then(|d| d.deployment.as_deref())
        .map(|d| d.env.as_slice())
        .unwrap_or_default();
    for (index, env) in own_env.iter().enumerate() {
        if let Some((secret, key)) = secret_ref(env)
            && let Some(volume) = holding(&gate, &secret, Some(&key))
        {
            let field = format!("{FIELD}.env[{index}].valueFrom.secretKeyRef");
            return Err(forbidden(field, &secret, Some(&key), volume));
        }
    }
    for env in &model.env {
        if let Some((secret, key)) = secret_ref(env)
            && let Some(volume) = holding(&gate, &secret, Some(&key))
        {
            return Err(forbidden(
                model_field.to_owned(),
                &secret,
                Some(&key),
                volume,
            ));
        }
    }
    let sharing = sharing(agent, placement);
    for volume in &model.volumes {
        for theirs in &gate {
            if let Some((_, Reach::Secret(secret))) = reach(volume, theirs, sharing) {
                return Err(forbidden(
                    model_field.to_owned(),
                    &secret,
                    None,
                    &theirs.name,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::VolumeMount;

    use super::*;

    fn agent(placement: &str, deployment: &str) -> Agent {
        serde_saphyr::from_str(&format!(
            "apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {{name: a, namespace: ns}}\nspec:\n  type: Declarative\n  declarative:\n    approval: {{placement: {placement}}}\n    deployment: {deployment}\n"
        ))
        .unwrap()
    }

    fn with(mut agent: Agent, volumes: Vec<Volume>, mounts: Vec<VolumeMount>) -> Agent {
        let deployment = agent
            .spec
            .declarative
            .as_mut()
            .unwrap()
            .deployment
            .as_mut()
            .unwrap();
        deployment.volumes = volumes;
        deployment.volume_mounts = mounts;
        agent
    }

    fn mount(name: &str) -> VolumeMount {
        VolumeMount {
            name: name.to_owned(),
            mount_path: "/mnt".to_owned(),
            ..VolumeMount::default()
        }
    }

    fn empty_dir(name: &str) -> Volume {
        Volume {
            name: name.to_owned(),
            empty_dir: Some(Default::default()),
            ..Volume::default()
        }
    }

    fn refusal(agent: &Agent, placement: GatePlacement) -> String {
        check("Agent ns/a", agent, Some(placement))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn each_gate_volume_may_be_neither_mounted_nor_declared_again_beside_the_gate() {
        let plain = agent("Sidecar", "{}");
        let gate = objects::GateOwner::agent(&plain).gate_volumes();
        assert_eq!(gate.len(), 3);
        for theirs in &gate {
            let name = &theirs.name;
            let mounted = with(
                plain.clone(),
                vec![empty_dir("data")],
                vec![mount("data"), mount(name)],
            );
            assert_eq!(
                refusal(&mounted, GatePlacement::Sidecar),
                format!(
                    "Agent ns/a: spec.declarative.deployment.volumeMounts[1].name: Forbidden: {name:?} is the approval gate's volume; the agent container may not mount it"
                )
            );
            let declared = with(
                plain.clone(),
                vec![empty_dir("data"), empty_dir(name)],
                vec![],
            );
            assert_eq!(
                refusal(&declared, GatePlacement::Sidecar),
                format!(
                    "Agent ns/a: spec.declarative.deployment.volumes[1].name: Forbidden: {name:?} is the approval gate's volume; the agent container may not mount it"
                )
            );
            // Without a gate, or with the gate in pods of its own, the name is the Agent's.
            assert!(check("Agent ns/a", &mounted, None).is_ok());
            let gateway = with(
                agent("Gateway", "{}"),
                vec![empty_dir(name)],
                vec![mount(name)],
            );
            assert!(check("Agent ns/a", &gateway, Some(GatePlacement::Gateway)).is_ok());
        }
    }

    #[test]
    fn a_volume_of_a_gate_secret_is_refused_in_either_placement() {
        let plain = agent("Sidecar", "{}");
        let secrets: Vec<(String, String)> = objects::GateOwner::agent(&plain)
            .gate_volumes()
            .into_iter()
            .filter_map(|v| Some((v.name, v.secret?.secret_name?)))
            .collect();
        assert_eq!(secrets.len(), 2, "gate.json and the binding key");
        for (gate_volume, secret) in secrets {
            let own: Volume = serde_saphyr::from_str(&format!(
                "{{name: mine, secret: {{secretName: {secret}}}}}"
            ))
            .unwrap();
            let projected: Volume = serde_saphyr::from_str(&format!(
                "{{name: mine, projected: {{sources: [{{configMap: {{name: c}}}}, {{secret: {{name: {secret}}}}}]}}}}"
            ))
            .unwrap();
            for placement in [GatePlacement::Sidecar, GatePlacement::Gateway] {
                let agent = with(plain.clone(), vec![own.clone()], vec![]);
                assert_eq!(
                    refusal(&agent, placement),
                    format!(
                        "Agent ns/a: spec.declarative.deployment.volumes[0].secret.secretName: Forbidden: Secret {secret:?} is the approval gate's (its volume {gate_volume:?}); the agent container may not mount it"
                    )
                );
                let agent = with(plain.clone(), vec![projected.clone()], vec![]);
                assert!(
                    refusal(&agent, placement).contains(
                        "spec.declarative.deployment.volumes[0].projected.sources[1].secret.name: Forbidden: Secret"
                    ),
                    "{placement:?}"
                );
            }
        }
    }

    #[test]
    fn a_volume_of_the_agents_secret_is_refused_when_it_projects_gate_json() {
        let items: Volume = serde_saphyr::from_str(
            "{name: cfg, secret: {secretName: a, items: [{key: config.json, path: c}, {key: gate.json, path: g}]}}",
        )
        .unwrap();
        let agent = with(agent("Sidecar", "{}"), vec![items], vec![]);
        assert_eq!(
            refusal(&agent, GatePlacement::Sidecar),
            "Agent ns/a: spec.declarative.deployment.volumes[0].secret.secretName: Forbidden: Secret \"a\" is the approval gate's (its volume \"gate-config\"); the agent container may not mount it"
        );
    }

    #[test]
    fn a_token_is_refused_where_the_pods_run_as_the_gate() {
        let token: Volume = serde_saphyr::from_str(
            "{name: mine, projected: {sources: [{serviceAccountToken: {path: t}}]}}",
        )
        .unwrap();
        let sidecar = with(agent("Sidecar", "{}"), vec![token.clone()], vec![]);
        assert_eq!(
            refusal(&sidecar, GatePlacement::Sidecar),
            "Agent ns/a: spec.declarative.deployment.volumes[0].projected.sources[0].serviceAccountToken: Forbidden: the pods run as the approval gate's ServiceAccount \"a\", so a token of it is the gate's credential (its volume \"gate-token\"); the agent container may not mount it"
        );
        // In Gateway placement the agent's pods have an identity of their own...
        let gateway = with(agent("Gateway", "{}"), vec![token.clone()], vec![]);
        assert!(check("Agent ns/a", &gateway, Some(GatePlacement::Gateway)).is_ok());
        // ...unless they are told to run as the gate's.
        let as_gate = with(
            agent("Gateway", "{serviceAccountName: a-gate}"),
            vec![token],
            vec![],
        );
        assert!(
            refusal(&as_gate, GatePlacement::Gateway)
                .contains("the approval gate's ServiceAccount \"a-gate\"")
        );
    }

    #[test]
    fn other_volumes_and_mounts_are_the_agents() {
        let agent = with(
            agent("Sidecar", "{}"),
            vec![
                empty_dir("scratch"),
                serde_saphyr::from_str("{name: certs, secret: {secretName: team-ca}}").unwrap(),
                // The Agent's Secret without gate.json: config.json is the agent's anyway.
                serde_saphyr::from_str(
                    "{name: cfg, secret: {secretName: a, items: [{key: config.json, path: c}]}}",
                )
                .unwrap(),
            ],
            vec![mount("scratch"), mount("certs"), mount("cfg")],
        );
        for placement in [GatePlacement::Sidecar, GatePlacement::Gateway] {
            assert!(check("Agent ns/a", &agent, Some(placement)).is_ok());
        }
    }
}
