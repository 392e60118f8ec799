//! How the controller has glibc's malloc hold less: fewer arenas, and freed memory handed back
//! to the system. Both matter most after a cold start, whose list decoding and burst of
//! reconciles allocate far more than the caches keep (docs/controller.md, "Memory on the real
//! control plane"). Elsewhere than Linux with glibc, both do nothing.

use std::time::Duration;

/// Arenas the controller's threads share, unless `MALLOC_ARENA_MAX` says otherwise.
const ARENAS: i32 = 1;

/// Limits glibc's malloc to [`ARENAS`] arena. By default a thread that finds an arena busy
/// gets one of its own, up to eight per core, and each arena keeps what was freed in it. After
/// a cold start one arena held the least, and the cold start took no longer
/// (docs/performance-history.md#controller-caches-and-memory): its threads spend their
/// time waiting on the apiserver, not on malloc's lock. Call it before the runtime starts its
/// threads; an operator's `MALLOC_ARENA_MAX` wins.
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        set_arena_max(ARENAS);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "glibc's malloc settings have no safe binding")]
fn set_arena_max(arenas: i32) {
    // SAFETY: mallopt only changes malloc's own settings; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: i32) {}

/// How often the controller hands back the memory malloc keeps after it was freed.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Hands back to the system, every [`TRIM_EVERY`], the memory glibc's malloc keeps after it
/// was freed. glibc returns freed memory only from the top of its heaps, so the process would
/// otherwise keep what a burst freed below it, as after a cold start
/// (docs/performance-history.md#controller-caches-and-memory).
pub async fn trim_free_memory() {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        trim();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "glibc's malloc_trim has no safe binding")]
fn trim() {
    // SAFETY: malloc_trim only walks and releases malloc's own free memory; it is
    // thread-safe and has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
