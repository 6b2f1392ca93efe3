//! What the control loop and the data workers of one transfer share.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::forward::Forward;
use super::integrity::Forgeries;
use crate::error::Error;
use crate::store::Store;

/// How often blocked reads wake up to check whether the transfer was aborted.
pub(super) const TICK: Duration = Duration::from_millis(200);

/// State shared by the control loop and the data workers.
pub(super) struct Shared {
    pub(super) store: Arc<Store>,
    pub(super) key: [u8; 32],
    pub(super) abort: AtomicBool,
    pub(super) fatal: Mutex<Option<Error>>,
    /// Data workers running now.
    pub(super) active: AtomicUsize,
    /// Most data workers at once: the declared streams plus `DATA_CONN_SLACK`.
    pub(super) max_active: usize,
    /// Whether a surplus data connection was reported (once per transfer).
    pub(super) surplus_warned: AtomicBool,
    /// Data connections accepted in all.
    pub(super) data_conns: AtomicUsize,
    /// Control connections accepted in all.
    pub(super) control_conns: AtomicUsize,
    /// When a data connection last started or ended, or a unit arrived.
    pub(super) last_activity: Mutex<Instant>,
    /// Data frames received.
    pub(super) units: AtomicU64,
    /// Workers busy writing a unit (a slow disk is not a lost connection).
    pub(super) busy: AtomicUsize,
    /// Frames that failed verification, on any connection.
    pub(super) forged: Forgeries,
    /// In a chain fan-out: where verified units are passed on.
    pub(super) forward: OnceLock<Arc<Forward>>,
}

impl Shared {
    pub(super) fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    pub(super) fn fail(&self, e: Error) {
        if let Ok(mut f) = self.fatal.lock() {
            f.get_or_insert(e);
        }
        self.abort.store(true, Ordering::Relaxed);
    }

    pub(super) fn take_fatal(&self) -> Option<Error> {
        self.fatal.lock().ok().and_then(|mut f| f.take())
    }
}

/// A duration in milliseconds, for `session::watch` (saturating: `--timeout 0` waits
/// for good).
pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
