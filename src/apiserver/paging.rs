//! Lists read a page at a time. Without a limit the apiserver answers a list in one response,
//! and kube decodes a page whole before anything can be dropped from it: 10 000
//! ApprovalRequests with the largest `argumentsPreview` (32 KiB) would be over 300 MiB of JSON
//! at once. The controller's watches and `kubectl hitl` page their lists the same way.

use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

/// Objects per page (kube's watcher pages 500 by default, a plain list not at all). A page is
/// decoded whole, managedFields and all, before anything is dropped from it, so a page is a
/// burst of memory (docs/performance-history.md#lists-paged); a Secret's metadata may carry a
/// last-applied annotation holding the whole Secret.
pub const LIST_PAGE_SIZE: u32 = 100;

/// A watch's configuration with its lists paged [`LIST_PAGE_SIZE`] objects at a time.
pub fn paged() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// Every object `params` selects, read [`LIST_PAGE_SIZE`] at a time with continue tokens. The
/// pages come from one snapshot of the collection, as one unpaged list would; a token that
/// expired mid-way (410 Gone) is an error, never a partial list.
pub async fn list_all<K>(api: &Api<K>, params: &ListParams) -> kube::Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    list_keeping(api, params, |_| true).await
}

/// The objects `params` selects that `keep` accepts, read as [`list_all`] reads them; the
/// others are dropped page by page, so no more than a page of them is ever held.
pub async fn list_keeping<K>(
    api: &Api<K>,
    params: &ListParams,
    mut keep: impl FnMut(&K) -> bool,
) -> kube::Result<Vec<K>>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.clone().limit(LIST_PAGE_SIZE);
    let mut items = Vec::new();
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items.into_iter().filter(&mut keep));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}
