//! The field managers this project writes as, one per writer, so `managedFields` tells who
//! wrote each field of an object.

/// The controller's reconcilers: every server-side apply and status of what they render.
pub const CONTROLLER: &str = "hitl-operator";
/// The controller's notifier: the delivery records, outcome and counters of a request.
pub const NOTIFIER: &str = "hitl-operator-notifier";
/// The gate: the requests it creates and their consumption, and its grants' uses.
pub const GATE: &str = "hitl-gate";
/// `kubectl hitl`: decisions, grants and revocations.
pub const KUBECTL_HITL: &str = "kubectl-hitl";
/// The controller's escalation steps: `status.tier` and `status.escalations` of a request.
pub const ESCALATION: &str = "hitl-operator-escalation";
