//! What every request to the inbox must show before it is served: the inbox listens on
//! 127.0.0.1 and acts with the user's own credentials, so any web page the user has open could
//! try to reach it. Refused: a Host other than the inbox's own (DNS rebinding), a cross-origin
//! request (Origin, Sec-Fetch-Site), a data request without the per-run token, and a write
//! without the token in a header and a JSON body (a form or a no-CORS fetch cannot send either
//! without a preflight, which the inbox never answers).

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Header carrying the token on writes (and optionally on reads).
pub const TOKEN_HEADER: &str = "x-hitl-token";

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The page and its static assets: hold nothing of the user's.
    Asset,
    /// The list of requests (read).
    Read,
    /// A decision (write).
    Write,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The Host header is not the inbox's address.
    Host,
    /// The request comes from another origin.
    CrossOrigin,
    /// The per-run token is missing or wrong.
    Token,
    /// A write that is not a JSON POST.
    NotJson,
}

impl Refusal {
    /// The HTTP status to answer with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Host | Self::CrossOrigin | Self::Token => StatusCode::FORBIDDEN,
            Self::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    /// What to say.
    pub fn message(self) -> &'static str {
        match self {
            Self::Host => {
                "refused: this inbox answers only to its own address (127.0.0.1 or localhost and its port)"
            }
            Self::CrossOrigin => "refused: cross-origin request",
            Self::Token => {
                "refused: missing or wrong token; open the address `kubectl hitl ui` printed"
            }
            Self::NotJson => "refused: decisions are JSON POSTs",
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status(), self.message()).into_response()
    }
}

/// The checks of one inbox run: its port and its random token.
#[derive(Clone, Debug)]
pub struct Guard {
    token: String,
    hosts: [String; 2],
    origins: [String; 2],
}

impl Guard {
    /// The guard of an inbox on 127.0.0.1:`port` with `token`.
    pub fn new(port: u16, token: String) -> Self {
        let hosts = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
        let origins = hosts.clone().map(|h| format!("http://{h}"));
        Self {
            token,
            hosts,
            origins,
        }
    }

    /// A guard with a fresh random token (256 bits, hex).
    pub fn random(port: u16) -> std::io::Result<Self> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
        Ok(Self::new(port, hex::encode(bytes)))
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether a request with `method`, `headers` and the `token` query parameter (reads only:
    /// an EventSource cannot send headers) may have `access`.
    pub fn check(
        &self,
        access: Access,
        method: &Method,
        headers: &HeaderMap,
        query_token: Option<&str>,
    ) -> Result<(), Refusal> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if !header(header::HOST.as_str()).is_some_and(|h| self.hosts.iter().any(|o| o == h)) {
            return Err(Refusal::Host);
        }
        match header(header::ORIGIN.as_str()) {
            Some(origin) if !self.origins.iter().any(|o| o == origin) => {
                return Err(Refusal::CrossOrigin);
            }
            None if access == Access::Write => return Err(Refusal::CrossOrigin),
            _ => {}
        }
        if header("sec-fetch-site").is_some_and(|s| s != "same-origin" && s != "none") {
            return Err(Refusal::CrossOrigin);
        }
        let token = match access {
            Access::Asset => return Ok(()),
            Access::Read => header(TOKEN_HEADER).or(query_token),
            Access::Write => header(TOKEN_HEADER),
        };
        if !token.is_some_and(|t| same(t.as_bytes(), self.token.as_bytes())) {
            return Err(Refusal::Token);
        }
        if access == Access::Write {
            let json = header(header::CONTENT_TYPE.as_str()).is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
            if *method != Method::POST || !json {
                return Err(Refusal::NotJson);
            }
        }
        Ok(())
    }
}

/// Equality that takes the same time wherever the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const PORT: u16 = 8123;

    fn guard() -> Guard {
        Guard::new(PORT, "t0ken".into())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn write_headers() -> Vec<(&'static str, &'static str)> {
        vec![
            ("host", "127.0.0.1:8123"),
            ("origin", "http://127.0.0.1:8123"),
            ("sec-fetch-site", "same-origin"),
            ("x-hitl-token", "t0ken"),
            ("content-type", "application/json"),
        ]
    }

    fn check_write(pairs: &[(&'static str, &str)]) -> Result<(), Refusal> {
        guard().check(Access::Write, &Method::POST, &headers(pairs), None)
    }

    #[test]
    fn a_same_origin_json_post_with_the_token_passes() {
        assert_eq!(check_write(&write_headers()), Ok(()));
        let mut localhost = write_headers();
        localhost[0].1 = "localhost:8123";
        localhost[1].1 = "http://localhost:8123";
        assert_eq!(check_write(&localhost), Ok(()));
    }

    #[test]
    fn writes_are_refused_for_each_missing_or_wrong_part() {
        let cases: [(&str, &str, Refusal); 8] = [
            ("host", "evil.example:8123", Refusal::Host),
            ("host", "127.0.0.1:9999", Refusal::Host),
            ("origin", "http://evil.example", Refusal::CrossOrigin),
            ("origin", "null", Refusal::CrossOrigin),
            ("sec-fetch-site", "cross-site", Refusal::CrossOrigin),
            ("x-hitl-token", "t0kem", Refusal::Token),
            ("x-hitl-token", "", Refusal::Token),
            ("content-type", "text/plain", Refusal::NotJson),
        ];
        for (name, value, want) in cases {
            let mut h = write_headers();
            h.iter_mut().find(|(k, _)| *k == name).unwrap().1 = value;
            assert_eq!(check_write(&h), Err(want), "{name}: {value}");
        }
        for (name, want) in [
            ("host", Refusal::Host),
            ("origin", Refusal::CrossOrigin),
            ("x-hitl-token", Refusal::Token),
            ("content-type", Refusal::NotJson),
        ] {
            let h: Vec<_> = write_headers()
                .into_iter()
                .filter(|(k, _)| *k != name)
                .collect();
            assert_eq!(check_write(&h), Err(want), "without {name}");
        }
        let get = guard().check(
            Access::Write,
            &Method::GET,
            &headers(&write_headers()),
            None,
        );
        assert_eq!(get, Err(Refusal::NotJson));
    }

    #[test]
    fn a_write_takes_the_token_from_the_header_only() {
        let h: Vec<_> = write_headers()
            .into_iter()
            .filter(|(k, _)| *k != "x-hitl-token")
            .collect();
        let r = guard().check(Access::Write, &Method::POST, &headers(&h), Some("t0ken"));
        assert_eq!(r, Err(Refusal::Token));
    }

    #[test]
    fn reads_take_the_token_from_the_query_and_assets_need_none() {
        let plain = headers(&[("host", "127.0.0.1:8123")]);
        let g = guard();
        assert_eq!(
            g.check(Access::Read, &Method::GET, &plain, Some("t0ken")),
            Ok(())
        );
        assert_eq!(
            g.check(Access::Read, &Method::GET, &plain, None),
            Err(Refusal::Token)
        );
        assert_eq!(g.check(Access::Asset, &Method::GET, &plain, None), Ok(()));
        let rebinding = headers(&[("host", "attacker.example")]);
        assert_eq!(
            g.check(Access::Asset, &Method::GET, &rebinding, None),
            Err(Refusal::Host)
        );
    }

    #[test]
    fn random_tokens_are_long_and_differ() {
        let (a, b) = (Guard::random(1).unwrap(), Guard::random(1).unwrap());
        assert_eq!(a.token().len(), 64);
        assert_ne!(a.token(), b.token());
    }
}
