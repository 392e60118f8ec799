//! Kubernetes helpers shared by the reconcilers: server-side apply with one field manager, the field managers of every writer,
//! digests of what it applied, the one guarded write of a status, status conditions, lists read a page at a time, and watches
//! backed off while they fail.

pub mod applied;
pub mod apply;
pub mod backoff;
pub mod client;
pub mod conditions;
pub mod field_manager;
pub mod guarded;
pub mod ownership;
pub mod paging;

pub use apply::{Applicable, apply, apply_params, apply_status, is_applied};
pub use conditions::{new_condition, set_condition};
