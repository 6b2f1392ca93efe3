//! The signals that stop a run from outside (SIGINT, SIGTERM, SIGHUP): haul still stops
//! at once, but first removes what must not outlive it (a `haul limit` socket) and clears
//! the progress line, then dies of that same signal, so a shell sees 130, 143 or 129 and
//! a caller that checks for the signal sees it.
//!
//! No signal handler runs: [`install`] blocks the three signals before any thread exists
//! (threads inherit the mask) and one thread takes them with `sigwait`, so the clean-up
//! is ordinary code with no async-signal-safety to keep. Children start with an empty
//! mask (std's `Command` resets it), and a signal its caller set to be ignored (`nohup`,
//! `cmd &` in a script) stays ignored: it is neither blocked nor waited for.
//!
//! Deliberately not done: finishing or undoing the transfer (partial files stay for a
//! resume, as after SIGKILL). The list of clean-ups is process-wide state, the one global
//! here, because a signal is process-wide too.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};

/// The signals that stop a run and are worth cleaning up after.
const STOPPING: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// How long the clean-up after a signal may take before the process dies regardless.
const STOP_WAIT: Duration = Duration::from_secs(2);

type Cleanup = Box<dyn Fn() + Send>;

/// What to undo before dying of a signal, by registration number.
static CLEANUPS: Mutex<Vec<(u64, Cleanup)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

type LastWord = Box<dyn Fn(&str, i32) + Send>;

/// What to print after "stopped by", given the signal's name and the exit status a shell
/// shows for it (`--json`'s object).
static LAST_WORD: Mutex<Option<LastWord>> = Mutex::new(None);

/// Takes SIGINT, SIGTERM and SIGHUP over for this process (those not ignored). Call it
/// first in `main`, before any thread starts: a thread started earlier would still die
/// of them at once.
pub fn install() {
    let mut set = SigSet::empty();
    for s in STOPPING {
        if !ignored(s) {
            set.add(s);
        }
    }
    if set.iter().next().is_none() || set.thread_block().is_err() {
        return;
    }
    let started = std::thread::Builder::new()
        .name("haul-signals".into())
        .spawn(move || stop_on(set));
    if started.is_err() {
        // Without the waiting thread the signals would wait for ever: let them kill.
        let _ = set.thread_unblock();
    }
}

/// Whether `s` is ignored (by whoever started us: `nohup`, a script's `&`).
fn ignored(s: Signal) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`,
    // a plain C struct for which all-zero bytes are a valid value.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(s as libc::c_int, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Waits for the first stopping signal, cleans up, and dies of it.
fn stop_on(set: SigSet) {
    let Ok(sig) = set.wait() else {
        let _ = set.thread_unblock();
        return;
    };
    // The clean-up and the last line may block (a terminal stopped with ^S, a stderr pipe
    // nobody reads): the signal still ends the process, at most this much later.
    let _ = std::thread::Builder::new()
        .name("haul-signal-deadline".into())
        .spawn(move || {
            std::thread::sleep(STOP_WAIT);
            die_of(sig)
        });
    // Held until the end: no clean-up is added or dropped half-way through.
    let cleanups = lock();
    for (_, f) in cleanups.iter() {
        f();
    }
    // Held until the end too, so no progress line is drawn after this one.
    let mut err = std::io::stderr().lock();
    if err.is_terminal() {
        // The progress bar's line, cleared (and the tty's "^C" with it).
        let _ = err.write_all(b"\r\x1b[2K");
    }
    let _ = writeln!(err, "haul: stopped by {}", sig.as_str());
    let _ = err.flush();
    drop(err);
    if let Some(f) = LAST_WORD.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        f(sig.as_str(), 128 + sig as i32);
    }
    die_of(sig)
}

/// Ends the process by `sig`, whose disposition is the default one (an ignored signal is
/// never waited for): it kills once the calling thread lets it through.
fn die_of(sig: Signal) -> ! {
    let mut one = SigSet::empty();
    one.add(sig);
    let _ = one.thread_unblock();
    let _ = nix::sys::signal::raise(sig);
    std::process::exit(128 + sig as i32);
}

fn lock() -> MutexGuard<'static, Vec<(u64, Cleanup)>> {
    CLEANUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` if a signal stops the process while the returned guard lives; dropping the
/// guard forgets `f` (the owner cleans up itself on a normal exit).
#[must_use = "the clean-up is forgotten when the guard is dropped"]
pub fn on_stop(f: impl Fn() + Send + 'static) -> OnStop {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    lock().push((id, Box::new(f)));
    OnStop { id }
}

/// Has `f` say the run's last word if a signal stops it, after the "stopped by" line: `f`
/// gets the signal's name and the exit status a shell shows (130 for SIGINT).
pub fn last_word(f: impl Fn(&str, i32) + Send + 'static) {
    *LAST_WORD.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
}

/// Runs every registered clean-up now: for an exit that skips destructors
/// (`std::process::exit` on a thread other than the one that owns them).
pub fn run_cleanups() {
    for (_, f) in lock().iter() {
        f();
    }
}

/// A registered clean-up; see [`on_stop`].
pub struct OnStop {
    id: u64,
}

impl Drop for OnStop {
    fn drop(&mut self) {
        lock().retain(|(id, _)| *id != self.id);
    }
}
