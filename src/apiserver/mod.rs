//! How the operator talks to the kube-apiserver (named so it does not shadow the `kube` crate):
//! the client, server-side apply and the digests of what it applied, the field managers of
//! every writer, the one guarded write of a status, status conditions, lists read a page at a
//! time, watches backed off while they fail, and what each request is (to count them).

pub mod applied;
pub mod apply;
pub mod backoff;
pub mod client;
pub mod conditions;
pub mod field_manager;
pub mod guarded;
pub mod ownership;
pub mod paging;
pub mod request_kind;

pub use apply::{Applicable, apply, apply_params, apply_status, apply_unforced, is_applied};
pub use conditions::{new_condition, set_condition};
