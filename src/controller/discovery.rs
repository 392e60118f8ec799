//! Lists an MCP server's tools: Streamable HTTP through the rmcp client, legacy HTTP+SSE by
//! hand (rmcp has no SSE client transport).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::service::ClientInitializeError;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use serde_json::{Value, json};

use crate::api::remote_mcp_server::{DiscoveredTool, McpProtocol};
use crate::{sse, tool_risk};

/// Protocol version offered on the legacy SSE transport.
const SSE_PROTOCOL_VERSION: &str = "2024-11-05";

/// Lists every tool of the server at `url` (following pagination), within `timeout`.
pub async fn list_tools(
    http: &reqwest::Client,
    url: &str,
    protocol: McpProtocol,
    headers: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Vec<DiscoveredTool>, String> {
    let listing = async {
        match protocol {
            McpProtocol::StreamableHttp => list_streamable_http(http, url, headers).await,
            McpProtocol::Sse => list_sse(http, url, headers).await,
        }
    };
    let mut tools = tokio::time::timeout(timeout, listing)
        .await
        .map_err(|_| format!("no answer within {}s", timeout.as_secs_f64()))??;
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    Ok(tools)
}

async fn list_streamable_http(
    http: &reqwest::Client,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<Vec<DiscoveredTool>, String> {
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name =
            HeaderName::try_from(name.as_str()).map_err(|e| format!("header {name}: {e}"))?;
        let value =
            HeaderValue::try_from(value.as_str()).map_err(|e| format!("header {name}: {e}"))?;
        custom.insert(name, value);
    }
    let transport = StreamableHttpClientTransport::with_client(
        http.clone(),
        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom),
    );
    let client = ().serve(transport).await.map_err(|error| match &error {
        ClientInitializeError::TransportError { error, .. } => {
            let cause = match error
                .error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>()
            {
                Some(StreamableHttpError::Client(error)) => root_cause(error),
                _ => root_cause(error.error.as_ref()),
            };
            format!("connecting to {url}: {cause}")
        }
        other => other.to_string(),
    })?;
    let listed = client.list_all_tools().await.map_err(|e| e.to_string());
    // Closing the session is best effort: the tools are already known.
    let _ = client.cancel().await;
    Ok(listed?
        .into_iter()
        .map(|tool| DiscoveredTool {
            definition_sha256: serde_json::to_value(&tool)
                .ok()
                .as_ref()
                .and_then(Value::as_object)
                .and_then(tool_risk::definition_sha256),
            name: tool.name.to_string(),
            description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
        })
        .collect())
}

/// What to tell a user about a failed connection: the innermost cause (such as `failed to
/// lookup address information` or `Connection refused`) rather than rmcp's outer message,
/// which names its transport types.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// The server-to-client half of a legacy SSE session: its events, in order.
struct SseStream<S> {
    events: S,
}

impl<S> SseStream<S>
where
    S: futures::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin,
{
    /// The next event's type and data (events without data, such as comments, are skipped).
    async fn next_event(&mut self) -> Result<(Vec<u8>, Vec<u8>), String> {
        loop {
            let event = self
                .events
                .next()
                .await
                .ok_or("the SSE stream ended")?
                .map_err(|e| e.to_string())?;
            if let Some(data) = sse::data(&event) {
                return Ok((sse::event_type(&event).to_vec(), data.into_owned()));
            }
        }
    }

    /// Waits for the JSON-RPC response with `id` and returns its result.
    async fn result(&mut self, id: u64) -> Result<Value, String> {
        loop {
            let (event_type, data) = self.next_event().await?;
            if event_type != b"message" {
                continue;
            }
            let message: Value = serde_json::from_slice(&data)
                .map_err(|e| format!("invalid JSON-RPC message: {e}"))?;
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(format!("JSON-RPC error: {error}"));
            }
            return message
                .get("result")
                .cloned()
                .ok_or_else(|| "JSON-RPC response without result".to_string());
        }
    }
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    headers: &BTreeMap<String, String>,
) -> reqwest::RequestBuilder {
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request
}

async fn post(
    http: &reqwest::Client,
    endpoint: &reqwest::Url,
    headers: &BTreeMap<String, String>,
    message: Value,
) -> Result<(), String> {
    with_headers(http.post(endpoint.clone()).json(&message), headers)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map(drop)
        .map_err(|e| with_cause(&e))
}

/// `error` and, when it has any, its innermost cause (such as why a redirect was refused,
/// which reqwest's own message leaves out).
fn with_cause(error: &reqwest::Error) -> String {
    match std::error::Error::source(error) {
        Some(_) => format!("{error}: {}", root_cause(error)),
        None => error.to_string(),
    }
}

async fn list_sse(
    http: &reqwest::Client,
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<Vec<DiscoveredTool>, String> {
    let response = with_headers(http.get(url).header("accept", "text/event-stream"), headers)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| with_cause(&e))?;
    let base = response.url().clone();
    let mut stream = SseStream {
        events: Box::pin(sse::events(
            response
                .bytes_stream()
                .map(|r| r.map_err(std::io::Error::other)),
        )),
    };
    let endpoint = loop {
        let (event_type, data) = stream.next_event().await?;
        if event_type == b"endpoint" {
            let data = String::from_utf8_lossy(&data);
            break base
                .join(data.trim())
                .map_err(|e| format!("endpoint {data}: {e}"))?;
        }
    };

    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": SSE_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "hitl-operator", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    post(http, &endpoint, headers, initialize).await?;
    stream.result(0).await?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(http, &endpoint, headers, initialized).await?;

    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for id in 1u64.. {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params});
        post(http, &endpoint, headers, list).await?;
        let result = stream.result(id).await?;
        for tool in result
            .get("tools")
            .and_then(Value::as_array)
            .ok_or("tools/list result without tools")?
        {
            tools.push(DiscoveredTool {
                name: tool
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("tool without a name")?
                    .to_string(),
                description: tool
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                definition_sha256: tool.as_object().and_then(tool_risk::definition_sha256),
            });
        }
        cursor = result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_server_is_reported_by_its_root_cause() {
        crate::tls::install_provider();
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let error = list_tools(
            &crate::egress::client(),
            &format!("http://127.0.0.1:{port}/mcp"),
            McpProtocol::StreamableHttp,
            &BTreeMap::new(),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(
            error.starts_with(&format!("connecting to http://127.0.0.1:{port}/mcp: ")),
            "{error}"
        );
        assert!(error.contains("Connection refused"), "{error}");
        assert!(!error.contains("rmcp::"), "{error}");
    }

    #[tokio::test]
    async fn parses_events_split_across_chunks() {
        let chunks: Vec<std::io::Result<bytes::Bytes>> = vec![
            Ok(bytes::Bytes::from_static(b"event: endpoint\r\ndata: /mes")),
            Ok(bytes::Bytes::from_static(
                b"sage?s=1\r\n\r\n: comment\n\ndata: {\"a\":\ndata: 1}\n\n",
            )),
        ];
        let mut stream = SseStream {
            events: Box::pin(sse::events(futures::stream::iter(chunks))),
        };
        assert_eq!(
            stream.next_event().await.unwrap(),
            (b"endpoint".to_vec(), b"/message?s=1".to_vec())
        );
        assert_eq!(
            stream.next_event().await.unwrap(),
            (b"message".to_vec(), b"{\"a\":\n1}".to_vec())
        );
        assert_eq!(
            stream.next_event().await,
            Err("the SSE stream ended".into())
        );
    }
}
