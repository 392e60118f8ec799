//! kagent's controller-wide proxy (`--proxy-url`): calls to in-cluster tool servers and agents
//! go to the proxy instead, which routes them by the `x-kagent-host` header.
//!
//! Where a gate runs, the proxy is only ever used on the gate's own leg to the server (gate.json):
//! config.json keeps pointing gated servers at the gate.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::render::refs::{RefStore, url_namespace};

/// Header telling the proxy which host a call is for.
pub const PROXY_HOST_HEADER: &str = "x-kagent-host";

/// The proxy's URL: `http(s)://host[:port]`; any path is ignored, as kagent ignores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyUrl {
    scheme: String,
    authority: String,
}

impl FromStr for ProxyUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let url = reqwest::Url::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{text:?}: the scheme must be http or https"));
        }
        let host = url.host_str().ok_or_else(|| format!("{text:?}: no host"))?;
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Self {
            scheme: url.scheme().to_owned(),
            authority,
        })
    }
}

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

impl ProxyUrl {
    /// `url` routed through the proxy: the proxy's scheme and authority with the original
    /// path, and the original host in [`PROXY_HOST_HEADER`] (which overrides any header of
    /// that name). `None` when `url` does not parse.
    pub fn route(
        &self,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Option<(String, BTreeMap<String, String>)> {
        let original = reqwest::Url::parse(url).ok()?;
        let host = original.host_str()?.to_owned();
        let mut headers = headers.clone();
        headers.insert(PROXY_HOST_HEADER.to_owned(), host);
        // A URL written without a path keeps none (the parser would give it "/").
        let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
        let written_path = after_scheme
            .split(['?', '#'])
            .next()
            .is_some_and(|authority_and_path| authority_and_path.contains('/'));
        let path = if written_path { original.path() } else { "" };
        Some((format!("{self}{path}"), headers))
    }
}

/// Whether kagent counts a RemoteMCPServer URL as in-cluster (and so proxies it): a host under
/// `.svc.cluster.local`, or `name.namespace` for a Namespace that exists.
pub fn is_internal_url(url: &str, refs: &RefStore) -> bool {
    let in_cluster_domain = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.ends_with(".svc.cluster.local")))
        .unwrap_or(false);
    in_cluster_domain || url_namespace(url).is_some_and(|ns| refs.namespace(&ns).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::ObjectMeta;

    fn proxy() -> ProxyUrl {
        "http://proxy.kagent.svc.cluster.local:8080"
            .parse()
            .unwrap()
    }

    #[test]
    fn routes_the_path_to_the_proxy_and_names_the_host() {
        let (url, headers) = proxy()
            .route(
                "http://tools.test:8084/mcp?x=1",
                &BTreeMap::from([("Authorization".into(), "Bearer t".into())]),
            )
            .unwrap();
        assert_eq!(url, "http://proxy.kagent.svc.cluster.local:8080/mcp");
        assert_eq!(headers[PROXY_HOST_HEADER], "tools.test");
        assert_eq!(headers["Authorization"], "Bearer t");
        let (url, _) = proxy()
            .route("http://agent.test:8080", &BTreeMap::new())
            .unwrap();
        assert_eq!(url, "http://proxy.kagent.svc.cluster.local:8080");
    }

    #[test]
    fn refuses_proxy_urls_that_are_not_http() {
        assert!("ftp://proxy".parse::<ProxyUrl>().is_err());
        assert!("proxy:8080".parse::<ProxyUrl>().is_err());
        assert_eq!(
            "https://p.example:9443/ignored"
                .parse::<ProxyUrl>()
                .unwrap()
                .to_string(),
            "https://p.example:9443"
        );
    }

    #[test]
    fn internal_urls_are_cluster_domains_and_existing_namespaces() {
        let mut refs = RefStore::default();
        assert!(is_internal_url("http://a.b.svc.cluster.local/mcp", &refs));
        assert!(!is_internal_url("http://tools.kagent:8084/mcp", &refs));
        refs.insert_namespace(Namespace {
            metadata: ObjectMeta {
                name: Some("kagent".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        });
        assert!(is_internal_url("http://tools.kagent:8084/mcp", &refs));
        assert!(!is_internal_url(
            "https://external-mcp.example.com/mcp",
            &refs
        ));
        assert!(!is_internal_url("http://tools.kagent.svc:8084/mcp", &refs));
    }
}
