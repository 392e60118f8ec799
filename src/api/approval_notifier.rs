//! The `ApprovalNotifier` kind: where the controller tells people about ApprovalRequests of
//! one namespace (a generic webhook with CloudEvents, or a Slack incoming webhook), which
//! requests it covers, and on which events.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::DURATION_PATTERN;

/// Most attempts to deliver one message.
pub const MAX_ATTEMPTS: u32 = 10;
/// Attempts to deliver one message when the notifier does not say.
pub const DEFAULT_ATTEMPTS: u32 = 5;
/// Most reminders about one request.
pub const MAX_REMINDERS: u32 = 10;
/// Reminders about one request when `reminder.max` is not set.
pub const DEFAULT_REMINDERS: u32 = 3;

/// Where notifications about the ApprovalRequests of this namespace go, and when.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kagent.dev",
    version = "v1alpha2",
    kind = "ApprovalNotifier",
    plural = "approvalnotifiers",
    shortname = "apn",
    namespaced,
    status = "ApprovalNotifierStatus",
    cel,
    doc = "Sends notifications about the ApprovalRequests of its namespace to a webhook or Slack.",
    printcolumn = r#"{"name": "Channel", "type": "string", "jsonPath": ".spec.channel.type"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Delivered", "type": "integer", "description": "Messages delivered", "jsonPath": ".status.delivered"}"#,
    printcolumn = r#"{"name": "Failures", "type": "integer", "description": "Messages given up after every attempt failed", "jsonPath": ".status.failures"}"#,
    printcolumn = r#"{"name": "Last-Delivery", "type": "date", "jsonPath": ".status.lastDelivery.at"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    validation = kube::core::Rule::new("!has(self.spec.channel.buttons) || !self.spec.channel.buttons || self.spec.channel.type == 'Slack'").field_path(".spec.channel.buttons").message("buttons are for Slack channels only")
)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalNotifierSpec {
    /// Where the messages go.
    pub channel: NotificationChannel,
    /// The Agents whose requests are covered, by their labels (unset: every Agent of the
    /// namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_selector: Option<LabelSelector>,
    /// Only requests for these tools (unset: every tool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), inner(length(min = 1, max = 128)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub tools: Vec<String>,
    /// The events messages are sent on (unset: created, decided and expired; no reminders).
    /// Not named `on`: YAML 1.1 parsers, kubectl's among them, read that key as `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<NotifyOn>,
    /// Attempts to deliver one message, with exponential backoff between them (1 to 10,
    /// default 5). A message that fails every attempt is given up and counted in
    /// `status.failures`; decisions never wait for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: Option<i32>,
}

/// A channel.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationChannel {
    /// `Webhook` (a CloudEvents 1.0 JSON body) or `Slack` (an incoming webhook).
    #[serde(rename = "type")]
    pub channel_type: ChannelType,
    /// The Secret key (same namespace) holding the URL to POST to. URLs of incoming webhooks
    /// are credentials: they are never put in the spec.
    pub url_from: SecretKeyRef,
    /// Slack only: Approve and Deny buttons on messages about pending requests. They work when
    /// the Slack app's Interactivity Request URL points at the controller's Slack interactions
    /// endpoint (chart value `slack.interactions`), and only for Slack users the cluster admin
    /// mapped to Kubernetes users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buttons: Option<bool>,
}

/// The kind of channel.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ChannelType {
    /// An HTTP POST of a CloudEvents 1.0 structured JSON event.
    Webhook,
    /// A Slack-compatible incoming webhook (`text` and `blocks`).
    Slack,
}

impl ChannelType {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "Webhook",
            Self::Slack => "Slack",
        }
    }
}

/// A key of a Secret in the notifier's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// The events a notifier sends on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifyOn {
    /// A new request waits for a decision (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// Reminders while a request stays undecided (unset: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminder: Option<Reminder>,
    /// A request was approved or denied (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<bool>,
    /// A request expired without a decision (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired: Option<bool>,
}

/// Reminders about a request nobody decided.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reminder {
    /// Time without a decision before the first reminder, and between reminders (`15m`).
    #[schemars(length(min = 1, max = 64), pattern(DURATION_PATTERN))]
    pub after: String,
    /// Most reminders per request (1 to 10, default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max: Option<i32>,
}

impl ApprovalNotifierSpec {
    /// Attempts per message.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
            .and_then(|n| u32::try_from(n).ok())
            .map_or(DEFAULT_ATTEMPTS, |n| n.clamp(1, MAX_ATTEMPTS))
    }

    /// The events it sends on.
    pub fn notify_on(&self) -> NotifyOn {
        self.events.clone().unwrap_or_default()
    }
}

impl NotifyOn {
    /// Whether `created` is sent.
    pub fn on_created(&self) -> bool {
        self.created.unwrap_or(true)
    }

    /// Whether `decided` is sent.
    pub fn on_decided(&self) -> bool {
        self.decided.unwrap_or(true)
    }

    /// Whether `expired` is sent.
    pub fn on_expired(&self) -> bool {
        self.expired.unwrap_or(true)
    }
}

impl Reminder {
    /// Reminders per request.
    pub fn count(&self) -> u32 {
        self.max
            .and_then(|n| u32::try_from(n).ok())
            .map_or(DEFAULT_REMINDERS, |n| n.clamp(1, MAX_REMINDERS))
    }
}

/// Observed state of an ApprovalNotifier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalNotifierStatus {
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: the channel's URL can be read from its Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The last message delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<Delivery>,
    /// The last message given up after every attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Delivery>,
    /// Messages delivered since the notifier was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<i64>,
    /// Messages given up since the notifier was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<i64>,
}

/// One message about one request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The ApprovalRequest.
    #[schemars(length(max = 253))]
    pub request: String,
    /// `created`, `reminder-N`, `decided` or `expired`.
    #[schemars(length(max = 32))]
    pub event: String,
    /// When it was delivered or given up.
    pub at: Time,
    /// Why the last attempt failed (a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub error: Option<String>,
}
