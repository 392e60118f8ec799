//! The contract between the controller, which renders every Agent's runtime to use the session
//! store, and the store (`hitl-operator sessions`, [`crate::sessions`]), which takes only what
//! the controller renders: the runtime's projected token of [`SESSION_STORE_AUDIENCE`], from a
//! pod labelled as an Agent's pod of ours.

/// Audience of the projected token the runtime sends the store (file `kagent-token`, where
/// kagent's runtime reads it); the apiserver and kagent's controller refuse a token of it, and
/// the store refuses every other.
pub const SESSION_STORE_AUDIENCE: &str = "hitl-operator-sessions";

/// Port of the store's Service (kagent's controller serves the same API on 8083 too).
pub const SESSION_STORE_PORT: u16 = 8083;

/// Label, and its value, of the store's pods (the chart's), which Gateway placement's egress
/// policy lets the agent pods reach.
pub const SESSION_STORE_COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "session-store");

/// The store's address when the chart is installed as the README says (`helm install hitl
/// charts/hitl-operator -n hitl-system`): the controller's and `render`'s default.
pub const DEFAULT_SESSION_STORE_URL: &str = "http://hitl-sessions.hitl-system.svc:8083";
