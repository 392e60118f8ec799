//! Kubernetes helpers shared by the reconcilers: server-side apply with one field manager,
//! digests of what it applied, the one guarded write of a status, status conditions, lists read a page at a time, and watches
//! backed off while they fail.

pub mod applied;
pub mod apply;
pub mod backoff;
pub mod client;
pub mod conditions;
pub mod guarded;
pub mod ownership;
pub mod paging;

pub use apply::{Applicable, FIELD_MANAGER, apply, apply_params, apply_status, is_applied};
pub use conditions::{new_condition, set_condition};
