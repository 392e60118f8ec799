//! The process's TLS: one rustls provider for every client, the kube-apiserver's and the
//! outgoing ones (`egress`) alike.

/// Picks the one TLS provider every client of the process uses. kube is built on rustls with
/// ring, and reqwest/rmcp are built without a provider: without this they panic at run time.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
