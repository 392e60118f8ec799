//! Where notifier messages may go. An ApprovalNotifier's URL is chosen by whoever may create a
//! Secret and a notifier, and the controller POSTs to it from inside the cluster; so the
//! notifiers' client ([`RestrictedClient`]) refuses loopback (`127.0.0.0/8`, `::1`, and so the
//! name `localhost`), link-local (`169.254.0.0/16`, where cloud metadata services answer, and
//! `fe80::/10`) and unspecified (`0.0.0.0`, `::`) addresses, unless an address is in one of the
//! CIDRs the cluster admin allows (`--notifier-allow-cidrs`). An IP address in the URL is
//! checked before anything is sent; a name is checked on every address it resolves to, when
//! the client connects (so a name that resolves to `169.254.169.254` is refused too), and is
//! refused if any of them is. An IPv4-mapped IPv6 address (`::ffff:169.254.169.254`) counts as
//! its IPv4 address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::cidr::Cidr;

/// Why a destination is refused by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// `127.0.0.0/8`, `::1`: the controller's own pod.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`: the node's link, where metadata services answer.
    LinkLocal,
    /// `0.0.0.0`, `::`: on Linux, the controller's own pod again.
    Unspecified,
}

impl Class {
    /// The class of `ip` among the refused ones, if any.
    fn of(ip: IpAddr) -> Option<Self> {
        match ip.to_canonical() {
            ip if ip.is_loopback() => Some(Self::Loopback),
            ip if ip.is_unspecified() => Some(Self::Unspecified),
            IpAddr::V4(v4) if v4.is_link_local() => Some(Self::LinkLocal),
            IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(Self::LinkLocal),
            _ => None,
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Unspecified => "unspecified",
        })
    }
}

/// Why a notifier message was not sent to its destination. The words are fit for
/// `status.notifications[].lastError`: the host, never the rest of the URL.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// The URL's host is a refused IP address.
    #[error("refused: {address} is {class} (not in --notifier-allow-cidrs)")]
    Address {
        /// The address in the URL.
        address: IpAddr,
        /// Why it is refused.
        class: Class,
    },
    /// The URL's host name resolves to a refused address.
    #[error(
        "refused: {host} resolves to {address}, which is {class} (not in --notifier-allow-cidrs)"
    )]
    Resolved {
        /// The name in the URL.
        host: String,
        /// The refused address it resolves to.
        address: IpAddr,
        /// Why it is refused.
        class: Class,
    },
    /// The URL's host name does not resolve.
    #[error("cannot resolve {host}: {reason}")]
    Unresolved {
        /// The name in the URL.
        host: String,
        /// The system resolver's words.
        reason: String,
    },
}

/// The addresses notifiers may reach: any but the refused [`Class`]es, and those too where
/// they lie in an allowed CIDR.
#[derive(Clone, Debug, Default)]
pub struct Destinations {
    allowed: Vec<Cidr>,
}

impl Destinations {
    /// Refuses the [`Class`]es except within `allowed` (`--notifier-allow-cidrs`).
    pub fn new(allowed: Vec<Cidr>) -> Self {
        Self { allowed }
    }

    /// Why `ip` may not be reached, if it may not.
    fn refused(&self, ip: IpAddr) -> Option<Class> {
        let class = Class::of(ip)?;
        let ip = ip.to_canonical();
        (!self.allowed.iter().any(|cidr| cidr.contains(ip))).then_some(class)
    }

    /// Checks the host of `url` when it is an IP address; a name is checked when it resolves.
    fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        // The URL parser writes an address in any spelling (`2852039166`, `0xa9.0xfe.0xa9.0xfe`)
        // as its dotted or bracketed form.
        let Some(Ok(address)) = url
            .host_str()
            .map(|host| host.trim_matches(['[', ']']).parse::<IpAddr>())
        else {
            return Ok(());
        };
        match self.refused(address) {
            Some(class) => Err(Refusal::Address { address, class }),
            None => Ok(()),
        }
    }

    /// Resolves `host` with the system resolver and checks every address it gives.
    async fn resolve(&self, host: &str) -> Result<Vec<SocketAddr>, Refusal> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
            .await
            .map_err(|error| Refusal::Unresolved {
                host: host.to_owned(),
                reason: error.to_string(),
            })?
            .collect();
        for addr in &addrs {
            if let Some(class) = self.refused(addr.ip()) {
                return Err(Refusal::Resolved {
                    host: host.to_owned(),
                    address: addr.ip(),
                    class,
                });
            }
        }
        Ok(addrs)
    }
}

/// The resolver of [`RestrictedClient`]: the system's, refusing what [`Destinations`] refuses.
struct CheckingResolver(Arc<Destinations>);

impl Resolve for CheckingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let destinations = self.0.clone();
        Box::pin(async move {
            let addrs = destinations.resolve(name.as_str()).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The notifiers' HTTP client: [`super::client`]'s rules (no proxy, redirects only within the
/// origin), and only to the addresses [`Destinations`] allows.
#[derive(Clone)]
pub struct RestrictedClient {
    http: reqwest::Client,
    destinations: Arc<Destinations>,
}

impl RestrictedClient {
    /// A client reaching what `destinations` allows.
    pub fn new(destinations: Destinations) -> Self {
        let destinations = Arc::new(destinations);
        let http = super::builder()
            .dns_resolver(Arc::new(CheckingResolver(destinations.clone())))
            .build()
            .expect("a reqwest client with a TLS provider installed builds");
        Self { http, destinations }
    }

    /// A POST to `url`, or why its host is refused. A refused name fails the request when it
    /// is sent, with a [`Refusal`] among the error's causes.
    pub fn post(&self, url: Url) -> Result<reqwest::RequestBuilder, Refusal> {
        self.destinations.check_url(&url)?;
        Ok(self.http.post(url))
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn allowing(cidrs: &[&str]) -> Destinations {
        Destinations::new(cidrs.iter().map(|c| c.parse().unwrap()).collect())
    }

    #[test]
    fn loopback_link_local_and_unspecified_addresses_are_refused() {
        for (address, class) in [
            ("127.0.0.1", Some(Class::Loopback)),
            ("127.255.0.9", Some(Class::Loopback)),
            ("::1", Some(Class::Loopback)),
            ("169.254.169.254", Some(Class::LinkLocal)),
            ("fe80::1", Some(Class::LinkLocal)),
            ("febf::1", Some(Class::LinkLocal)),
            ("0.0.0.0", Some(Class::Unspecified)),
            ("::", Some(Class::Unspecified)),
            ("::ffff:169.254.169.254", Some(Class::LinkLocal)),
            ("::ffff:127.0.0.1", Some(Class::Loopback)),
            ("10.0.0.1", None),
            ("192.168.1.1", None),
            ("93.184.215.14", None),
            ("2001:db8::1", None),
            ("fec0::1", None),
            ("169.255.0.1", None),
        ] {
            assert_eq!(Class::of(ip(address)), class, "{address}");
            assert_eq!(
                Destinations::default().refused(ip(address)),
                class,
                "{address}"
            );
        }
    }

    #[test]
    fn an_allowed_cidr_permits_only_what_it_contains() {
        let destinations = allowing(&["127.0.0.0/8", "169.254.10.0/24"]);
        assert_eq!(destinations.refused(ip("127.0.0.1")), None);
        assert_eq!(destinations.refused(ip("::ffff:127.0.0.1")), None);
        assert_eq!(destinations.refused(ip("169.254.10.7")), None);
        assert_eq!(
            destinations.refused(ip("169.254.169.254")),
            Some(Class::LinkLocal)
        );
        assert_eq!(destinations.refused(ip("::1")), Some(Class::Loopback));
        assert_eq!(
            destinations.refused(ip("0.0.0.0")),
            Some(Class::Unspecified),
            "0.0.0.0 reaches loopback on Linux, yet 127.0.0.0/8 does not allow it"
        );
    }

    #[test]
    fn ip_addresses_in_urls_are_checked_in_every_spelling() {
        let destinations = Destinations::default();
        for (url, address, class) in [
            (
                "http://169.254.169.254/latest/meta-data",
                "169.254.169.254",
                Class::LinkLocal,
            ),
            ("http://2852039166/", "169.254.169.254", Class::LinkLocal),
            (
                "http://0xa9.0xfe.0xa9.0xfe/",
                "169.254.169.254",
                Class::LinkLocal,
            ),
            (
                "http://[::ffff:a9fe:a9fe]/",
                "::ffff:169.254.169.254",
                Class::LinkLocal,
            ),
            ("https://127.1:8443/", "127.0.0.1", Class::Loopback),
            ("http://[fe80::1]/", "fe80::1", Class::LinkLocal),
            ("http://0.0.0.0:8080/", "0.0.0.0", Class::Unspecified),
        ] {
            let refused = destinations.check_url(&Url::parse(url).unwrap());
            assert_eq!(
                refused,
                Err(Refusal::Address {
                    address: ip(address),
                    class
                }),
                "{url}"
            );
        }
        let refused = destinations
            .check_url(&Url::parse("http://169.254.169.254/").unwrap())
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "refused: 169.254.169.254 is link-local (not in --notifier-allow-cidrs)"
        );
        for url in [
            "https://hooks.slack.com/services/T/B/x",
            "http://10.0.0.7/hook",
        ] {
            assert_eq!(
                destinations.check_url(&Url::parse(url).unwrap()),
                Ok(()),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn a_name_is_refused_when_it_resolves_to_a_refused_address() {
        let resolver = CheckingResolver(Arc::new(Destinations::default()));
        let error = resolver
            .resolve(Name::from_str("localhost").unwrap())
            .await
            .err()
            .unwrap();
        let refusal = error.downcast_ref::<Refusal>().unwrap();
        assert!(
            matches!(refusal, Refusal::Resolved { host, class: Class::Loopback, .. } if host == "localhost"),
            "{refusal:?}"
        );
        assert!(
            refusal
                .to_string()
                .starts_with("refused: localhost resolves to "),
            "{refusal}"
        );

        let resolver = CheckingResolver(Arc::new(allowing(&["127.0.0.0/8", "::1/128"])));
        let addrs: Vec<SocketAddr> = resolver
            .resolve(Name::from_str("localhost").unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
