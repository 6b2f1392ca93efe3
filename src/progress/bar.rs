//! The live display of a running transfer: a bar on stderr when it is a terminal; with
//! `-P`/`--progress` asked for explicitly and stderr not a terminal (a log, a pipe), one
//! plain line every few seconds, as rsync writes its progress into logs. Both show the same
//! fields in the same order: percent, bytes done of the total, rate, elapsed time, ETA
//! (`--` until there is a rate: never "eta 0s" at 0%).
//!
//! Deliberately not here: what counts as done (the workers bump the counters).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::counters::{human, Counters};

/// How often a line is written when progress was asked for without a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// `-P`/`--progress` was given: show progress even where stderr is not a terminal.
static ASKED: AtomicBool = AtomicBool::new(false);

/// The bar drawn now, if any: warnings are printed above it instead of through it.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Says that progress was asked for explicitly (`-P`, `--progress`): without a terminal,
/// progress lines are written every few seconds.
pub fn set_asked(asked: bool) {
    ASKED.store(asked, Ordering::Relaxed);
}

/// Runs `print` (which writes whole lines on stderr) without tearing the bar drawn now:
/// the bar is cleared, the lines printed, the bar drawn again below them.
pub(super) fn above_bar(print: impl FnOnce()) {
    let bar = SHOWN.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match bar {
        Some(b) => b.suspend(print),
        None => print(),
    }
}

/// What a display shows.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A file transfer: also files done of files announced.
    Files,
    /// A stream: bytes as they go out (a length given with `--size`: percent and ETA).
    Stream,
}

/// A progress display on stderr while a transfer runs.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    bar: Option<ProgressBar>,
    /// Clears the bar if a signal stops the process while it is drawn.
    _on_stop: Option<crate::signals::OnStop>,
}

impl Progress {
    /// Starts showing a file transfer's progress when `enabled`: a bar on a terminal,
    /// lines when asked for ([`set_asked`]).
    pub fn start(counters: Arc<Counters>, enabled: bool) -> Progress {
        Progress::begin(counters, enabled, Kind::Files)
    }

    /// Starts showing a stream's progress when `enabled`: bytes, rate and compression
    /// ratio; with a known total (`total_bytes` non-zero) also percent and ETA.
    pub fn start_stream(counters: Arc<Counters>, enabled: bool) -> Progress {
        Progress::begin(counters, enabled, Kind::Stream)
    }

    fn begin(counters: Arc<Counters>, enabled: bool, kind: Kind) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let none = |stop| Progress {
            stop,
            thread: None,
            bar: None,
            _on_stop: None,
        };
        if !enabled {
            return none(stop);
        }
        if !std::io::stderr().is_terminal() {
            if !ASKED.load(Ordering::Relaxed) {
                return none(stop);
            }
            let stop2 = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name("haul-progress".into())
                .spawn(move || lines(&counters, kind, &stop2))
                .ok();
            return Progress {
                stop,
                thread,
                bar: None,
                _on_stop: None,
            };
        }
        let total = counters.total_bytes.load(Ordering::Relaxed);
        let known = kind == Kind::Files || total > 0;
        let bar = ProgressBar::with_draw_target(
            known.then_some(total),
            ProgressDrawTarget::stderr_with_hz(5),
        );
        let template = match known {
            true => {
                "{bar:25.cyan/blue} {pct} {bytes}/{total_bytes} {binary_bytes_per_sec} \
                 {elapsed} eta {eta_or} {msg}"
            }
            false => "{spinner} {bytes} {binary_bytes_per_sec} {elapsed} {msg}",
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("pct", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{}", percent(s.pos(), s.len().unwrap_or(0)));
            })
            .with_key(
                "eta_or",
                |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let rate = s.per_sec();
                    let left = s.len().unwrap_or(0).saturating_sub(s.pos());
                    let _ = write!(w, "{}", eta(left, s.pos(), rate));
                },
            );
        bar.set_style(style.progress_chars("=> "));
        *SHOWN.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar.clone());
        let stop2 = Arc::clone(&stop);
        let shown = bar.clone();
        let on_stop = clear_on_stop(&bar);
        let thread = std::thread::Builder::new()
            .name("haul-progress".into())
            .spawn(move || {
                while !stop2.load(Ordering::Relaxed) {
                    if known {
                        bar.set_length(counters.total_bytes.load(Ordering::Relaxed));
                    }
                    bar.set_position(done(&counters, kind));
                    bar.set_message(note(&counters, kind));
                    std::thread::sleep(Duration::from_millis(200));
                }
                bar.finish_and_clear();
            })
            .ok();
        Progress {
            stop,
            thread,
            bar: (kind == Kind::Files).then_some(shown),
            _on_stop: Some(on_stop),
        }
    }

    /// A handle that prints lines without tearing this bar.
    pub fn printer(&self) -> Printer {
        Printer {
            bar: self.bar.clone(),
        }
    }

    /// Stops and clears the bar.
    pub fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            // Cleared: nothing is drawn any more for a warning to print above.
            *SHOWN.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Bytes done: a stream's sender counts them as they go on the wire (the receiver's
/// acknowledgements come a whole block later), a receiver as they come off it (a unit is
/// written only once all of it is verified), everything else as written or sent. What
/// arrived counts frame headers too (and data sent again): never more than the total.
fn done(c: &Counters, kind: Kind) -> u64 {
    let done = c.done_bytes.load(Ordering::Relaxed);
    let total = c.total_bytes.load(Ordering::Relaxed);
    let arrived = match total {
        0 => c.arrived_bytes.load(Ordering::Relaxed),
        t => c.arrived_bytes.load(Ordering::Relaxed).min(t),
    };
    match kind {
        Kind::Stream => done.max(c.sent_bytes.load(Ordering::Relaxed)).max(arrived),
        Kind::Files => done.max(arrived),
    }
}

/// What follows the ETA: files done, the compression ratio, the cap.
fn note(c: &Counters, kind: Kind) -> String {
    let done = done(c, kind);
    let wire = c.wire_bytes.load(Ordering::Relaxed);
    let ratio = match wire > 0 && done > wire + wire / 50 {
        true => format!(" ratio {:.2}", done as f64 / wire as f64),
        false => String::new(),
    };
    let files = match kind {
        Kind::Files => format!(
            "files {}/{}",
            c.done_files.load(Ordering::Relaxed),
            c.total_files.load(Ordering::Relaxed)
        ),
        Kind::Stream => String::new(),
    };
    format!("{files}{ratio}{}", cap_note(c))
        .trim_start()
        .to_string()
}

/// "35%"; "0%" while nothing is known (an empty total is not done).
fn percent(done: u64, total: u64) -> String {
    match total {
        0 => "0%".into(),
        t => format!("{}%", (done.min(t) as f64 * 100.0 / t as f64) as u64),
    }
}

/// The time left for `left` bytes at `rate` bytes/s; `--` until something moved.
fn eta(left: u64, done: u64, rate: f64) -> String {
    if done == 0 || rate < 1.0 || !rate.is_finite() {
        return "--".into();
    }
    secs((left as f64 / rate).round() as u64)
}

/// A duration as "45s", "3m05s", "2h07m".
fn secs(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// Without a terminal: a line every [`LINE_EVERY`] until `stop`, the rate that of the last
/// interval (what the link does now), the ETA at that rate.
fn lines(c: &Counters, kind: Kind, stop: &AtomicBool) {
    let started = Instant::now();
    let (mut last, mut last_at) = (done(c, kind), started);
    let mut next = started + LINE_EVERY;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(200)));
            continue;
        }
        next = now + LINE_EVERY;
        let d = done(c, kind);
        let rate = d.saturating_sub(last) as f64 / (now - last_at).as_secs_f64().max(1e-3);
        (last, last_at) = (d, now);
        let total = c.total_bytes.load(Ordering::Relaxed);
        let line = line(d, total, rate, (now - started).as_secs(), &note(c, kind));
        above_bar(|| eprintln!("{line}"));
    }
}

/// One progress line: the bar's fields without the bar.
fn line(done: u64, total: u64, rate: f64, elapsed: u64, note: &str) -> String {
    let of = match total {
        0 => human(done),
        t => format!("{} {}/{}", percent(done, t), human(done), human(t)),
    };
    let eta = match total {
        0 => String::new(),
        t => format!(" eta {}", eta(t.saturating_sub(done), done, rate)),
    };
    let note = match note {
        "" => String::new(),
        n => format!(" {n}"),
    };
    format!(
        "haul: progress: {of} {}/s {}{eta}{note}",
        human(rate as u64),
        secs(elapsed)
    )
}

/// Clears `bar` (every line it drew) if a signal stops the process; once cleared it
/// draws nothing more.
fn clear_on_stop(bar: &ProgressBar) -> crate::signals::OnStop {
    let bar = bar.clone();
    crate::signals::on_stop(move || bar.finish_and_clear())
}

/// " limit 10.00 MiB/s" while a bandwidth cap is set, else nothing.
fn cap_note(c: &Counters) -> String {
    match c.limit.load(Ordering::Relaxed) {
        0 => String::new(),
        r => format!(" limit {}/s", human(r)),
    }
}

/// Prints the lines of `-v` and `-i` while a progress bar may be drawn.
#[derive(Clone, Default)]
pub struct Printer {
    bar: Option<ProgressBar>,
}

impl Printer {
    /// Prints one line on stdout, or stderr when `stderr`, without tearing the bar.
    pub fn say(&self, line: &str, stderr: bool) {
        let print = || {
            if stderr {
                eprintln!("{line}");
            } else {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        };
        match &self.bar {
            Some(b) => b.suspend(print),
            None => print(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_done_has_no_eta() {
        // Before: "0 B/19.07 MiB 0% 0 B/s eta 0s".
        assert_eq!(eta(20 << 20, 0, 0.0), "--");
        assert_eq!(eta(20 << 20, 1, 0.0), "--");
        assert_eq!(eta(10 << 20, 1 << 20, (2 << 20) as f64), "5s");
        assert_eq!(percent(0, 0), "0%");
        assert_eq!(percent(5, 10), "50%");
        assert_eq!(secs(185), "3m05s");
        assert_eq!(
            line(1 << 20, 4 << 20, (1 << 20) as f64, 1, "files 1/2"),
            "haul: progress: 25% 1.00 MiB/4.00 MiB 1.00 MiB/s 1s eta 3s files 1/2"
        );
        assert_eq!(line(0, 0, 0.0, 0, ""), "haul: progress: 0 B 0 B/s 0s");
    }
}
