//! Where the pod finds what the controller renders: the files of the agent's Secret and of the
//! binding-key Secret, and the directories they are mounted at. The controller mounts them
//! there; the gate's and the runtime's defaults read them from there.

/// Where the agent container reads config.json and agent-card.json.
pub const CONFIG_DIR: &str = "/config";
/// The agent runtime's configuration in the agent's Secret (kagent's `config.json`).
pub const AGENT_CONFIG_ITEM: &str = "config.json";
/// The agent's A2A card in the agent's Secret.
pub const AGENT_CARD_ITEM: &str = "agent-card.json";
/// The gate's configuration in the agent's Secret; mounted only into the gate container.
pub const GATE_CONFIG_ITEM: &str = "gate.json";
/// Where the gate reads gate.json.
pub const GATE_CONFIG_DIR: &str = "/etc/hitl-gate";
/// The gate's default `--config`: [`GATE_CONFIG_ITEM`] as mounted in [`GATE_CONFIG_DIR`].
pub const GATE_CONFIG_PATH: &str = "/etc/hitl-gate/gate.json";
/// Where the gate reads the Agent's binding key.
pub const BINDING_KEY_DIR: &str = "/etc/hitl-gate-key";
/// Key of the binding key in its Secret.
pub const BINDING_KEY_ITEM: &str = "key";
/// The gate's default `--binding-key`: [`BINDING_KEY_ITEM`] as mounted in [`BINDING_KEY_DIR`].
pub const BINDING_KEY_PATH: &str = "/etc/hitl-gate-key/key";
/// Where in-cluster clients (the gate's included) look for the ServiceAccount token.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_paths_are_the_items_in_their_mount_directories() {
        assert_eq!(
            GATE_CONFIG_PATH,
            format!("{GATE_CONFIG_DIR}/{GATE_CONFIG_ITEM}")
        );
        assert_eq!(
            BINDING_KEY_PATH,
            format!("{BINDING_KEY_DIR}/{BINDING_KEY_ITEM}")
        );
    }
}
