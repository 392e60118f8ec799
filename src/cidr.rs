//! IP ranges in CIDR notation, as flags and rules give them: the cluster's internal ranges
//! (`render`) and the notifier destinations allowed despite being internal (`egress`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// An IP range in CIDR notation (`10.0.0.0/8`, `fd00::/8`), host bits cleared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr(IpNet);

impl Cidr {
    /// Whether `ip` lies in this range (an IPv4 address is never in an IPv6 range).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }

    /// Whether this is an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        matches!(self.0, IpNet::V4(_))
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let net: IpNet = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/8"))?;
        if net != net.trunc() {
            return Err(format!(
                "{text:?} has host bits set; write its network address, such as {}",
                net.trunc()
            ));
        }
        Ok(Self(net))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_print_and_contain() {
        let cidr: Cidr = "172.16.0.0/12".parse().unwrap();
        assert_eq!(cidr.to_string(), "172.16.0.0/12");
        assert!(cidr.contains("172.31.255.255".parse().unwrap()));
        assert!(!cidr.contains("172.32.0.1".parse().unwrap()));
        assert!(!cidr.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.is_ipv4());
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "10.0.0.1/8", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert!(
            "10.0.0.1/8"
                .parse::<Cidr>()
                .unwrap_err()
                .contains("10.0.0.0/8")
        );
    }
}
