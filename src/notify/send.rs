//! Sending one message: an HTTP POST with a bounded time, where only a 2xx answer counts.

use std::time::Duration;

use serde_json::Value;

use super::message::CLOUD_EVENT_CONTENT_TYPE;
use crate::api::approval_notifier::ChannelType;

/// Longest time one attempt may take.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest error text kept from a failed attempt.
const MAX_ERROR: usize = 512;

/// POSTs `body` to `url` as `channel` wants it. `Err` says why the attempt failed, in words
/// fit for `status.notifications[].lastError` (never the URL: it is a credential).
pub async fn post(
    http: &reqwest::Client,
    channel: ChannelType,
    url: &str,
    body: &Value,
) -> Result<(), String> {
    let content_type = match channel {
        ChannelType::Webhook => CLOUD_EVENT_CONTENT_TYPE,
        ChannelType::Slack => "application/json",
    };
    let response = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body.to_string())
        .timeout(ATTEMPT_TIMEOUT)
        .send()
        .await
        .map_err(|e| describe(&e.without_url()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    match text.trim() {
        "" => Err(format!("HTTP {status}")),
        text => Err(cut(&format!("HTTP {status}: {text}"))),
    }
}

fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    cut(&text)
}

fn cut(text: &str) -> String {
    text.chars().take(MAX_ERROR).collect()
}
