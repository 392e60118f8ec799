//! Notifications about ApprovalRequests (ApprovalNotifier): which message is due for a
//! request ([`plan`]), what it says ([`message`]) and how it is sent ([`send`]). The controller
//! drives them (`controller::notifier`): only the leader sends, and every attempt is recorded
//! in the request's status before it is made.

pub mod message;
pub mod plan;
pub mod send;
pub mod slack;
