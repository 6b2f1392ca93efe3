//! The sender driver: walks the sources, streams the manifest on the control connection,
//! and runs one blocking worker thread per data connection (read → hash → compress →
//! frame → socket), fed by the largest-first work queue.
//!
//! Calling order on the control stream is the one `protocol` documents: Start, then
//! Entries/Need pairs, then Finish, answered by Done or Error.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use crate::codec::{unit_hash, Compression, Encoder};
use crate::error::{Error, Result};
use crate::plan::queue::{Work, WorkQueue};
use crate::plan::walk::{self, Skipped, Source, Walked};
use crate::progress::{Counters, Progress};
use crate::protocol::{
    encode_data_header, encode_frame, Control, FrameKind, FrameReader, Segment, Summary,
};
use crate::transport::{Conn, Role, TransportError};

/// How to send.
#[derive(Clone, Debug)]
pub struct SendOptions {
    /// Data connections.
    pub streams: usize,
    /// Compression per unit.
    pub compress: Compression,
    /// Block size in bytes.
    pub block_size: u64,
    /// Draw a progress bar (when stderr is a terminal).
    pub progress: bool,
}

/// What the sender reports when the receiver confirmed the transfer.
#[derive(Debug)]
pub struct SendReport {
    /// The receiver's summary.
    pub summary: Summary,
    /// Sender-side counters (bytes read, wire bytes).
    pub counters: Arc<Counters>,
    /// Files that could not be read, and why.
    pub failed: Vec<(PathBuf, io::Error)>,
    /// When the transfer started.
    pub started: Instant,
}

impl SendReport {
    /// The error to exit with when some files were skipped.
    pub fn partial_error(&self) -> Option<Error> {
        let (path, e) = self.failed.first()?;
        Some(Error::Partial {
            count: self.failed.len() as u64,
            first: format!("{}: {e}", path.display()),
        })
    }
}

/// Files the workers or the walk could not read.
#[derive(Default)]
struct Failures {
    ids: HashSet<u64>,
    list: Vec<(PathBuf, io::Error)>,
}

const BATCH_ENTRIES: usize = 2000;
const BATCH_BYTES: usize = 1 << 20;

/// Sends `sources`. `dial` opens one authenticated connection of the given role.
pub fn send<D>(sources: &[Source], opts: &SendOptions, key: [u8; 32], dial: D) -> Result<SendReport>
where
    D: Fn(Role) -> Result<Conn> + Sync,
{
    walk::check_sources(sources)?;
    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    let progress = Progress::start(Arc::clone(&counters), opts.progress);
    let mut control = dial(Role::Control)?;
    let mut reader = FrameReader::new();
    write_msg(
        &mut control,
        &Control::Start {
            streams: opts.streams as u16,
            block_size: opts.block_size as u32,
        },
    )?;
    let queue = WorkQueue::new(opts.block_size);
    let failures = Mutex::new(Failures::default());

    let result = std::thread::scope(|s| {
        let mut workers = Vec::new();
        for i in 0..opts.streams {
            let (queue, failures, counters, dial) = (&queue, &failures, &counters, &dial);
            let h = std::thread::Builder::new()
                .name(format!("haul-send-{i}"))
                .spawn_scoped(s, move || {
                    let r = dial(Role::Data)
                        .and_then(|conn| data_worker(conn, queue, key, opts, counters, failures));
                    if r.is_err() {
                        queue.abort();
                    }
                    r
                })
                .map_err(|e| Error::io("starting a stream thread", e))?;
            workers.push(h);
        }
        let (wtx, wrx) = crossbeam_channel::bounded::<WalkMsg>(BATCH_ENTRIES * 2);
        let walker = std::thread::Builder::new()
            .name("haul-walk".into())
            .stack_size(64 << 20)
            .spawn_scoped(s, move || {
                let tx2 = wtx.clone();
                let r = walk::walk(
                    sources,
                    |w| wtx.send(WalkMsg::Entry(Box::new(w))).is_ok(),
                    |sk| {
                        let _ = tx2.send(WalkMsg::Skipped(sk));
                    },
                );
                let _ = wtx.send(WalkMsg::End(r));
            })
            .map_err(|e| Error::io("starting the walk thread", e))?;

        let manifest = run_manifest(
            &mut control,
            &mut reader,
            &wrx,
            &queue,
            &counters,
            &failures,
        );
        if manifest.is_err() {
            queue.abort();
        } else {
            queue.close();
        }
        drop(wrx);
        let _ = walker.join();
        let mut worker_err = None;
        for h in workers {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    worker_err.get_or_insert(e);
                }
                Err(_) => {
                    worker_err
                        .get_or_insert(Error::io("stream thread", io::Error::other("panicked")));
                }
            }
        }
        manifest?;
        if let Some(e) = worker_err {
            // The receiver usually says why it dropped us: prefer its words.
            return Err(remote_reason(&mut control, &mut reader).unwrap_or(e));
        }
        let failed: Vec<u64> = failures
            .lock()
            .map(|f| f.ids.iter().copied().collect())
            .unwrap_or_default();
        write_msg(&mut control, &Control::Finish { failed })?;
        match read_msg(&mut control, &mut reader, None)? {
            Control::Done(summary) => Ok(summary),
            Control::Error { code, message } => Err(Error::Remote {
                side: "receiver",
                message,
                code,
            }),
            other => Err(crate::protocol::ProtocolError::Unexpected(other.name().into()).into()),
        }
    });
    progress.finish();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            if !matches!(e, Error::Remote { .. } | Error::Transport(_)) {
                let _ = write_msg(
                    &mut control,
                    &Control::Error {
                        code: e.exit_code(),
                        message: e.to_string(),
                    },
                );
            }
            return Err(e);
        }
    };
    let _ = control.shutdown_write();
    let failed = failures.into_inner().map(|f| f.list).unwrap_or_default();
    Ok(SendReport {
        summary,
        counters,
        failed,
        started,
    })
}

enum WalkMsg {
    Entry(Box<Walked>),
    Skipped(Skipped),
    End(Result<()>),
}

/// Streams the manifest in batches and queues what the receiver needs.
fn run_manifest(
    control: &mut Conn,
    reader: &mut FrameReader,
    wrx: &crossbeam_channel::Receiver<WalkMsg>,
    queue: &WorkQueue,
    counters: &Counters,
    failures: &Mutex<Failures>,
) -> Result<()> {
    let mut batch = Vec::new();
    let mut batch_bytes = 0usize;
    let mut data = HashMap::new();
    loop {
        let msg = if batch.is_empty() {
            wrx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            wrx.recv_timeout(Duration::from_millis(20))
        };
        let end = match msg {
            Ok(WalkMsg::Entry(w)) => {
                let w = *w;
                if let Some(d) = w.data {
                    Counters::add(&counters.total_files, 1);
                    Counters::add(
                        &counters.total_bytes,
                        d.extents.iter().map(|(a, b)| b - a).sum(),
                    );
                    data.insert(w.entry.id, d);
                }
                batch_bytes += w.entry.path.len() + 64;
                batch.push(w.entry);
                None
            }
            Ok(WalkMsg::Skipped(sk)) => {
                crate::progress::warn(&format!("cannot read {}: {}", sk.path.display(), sk.error));
                if let Ok(mut f) = failures.lock() {
                    f.list.push((sk.path, sk.error));
                }
                None
            }
            Ok(WalkMsg::End(r)) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Ok(())),
        };
        let flush = end.is_some()
            || batch.len() >= BATCH_ENTRIES
            || batch_bytes >= BATCH_BYTES
            || (!batch.is_empty() && wrx.is_empty());
        if flush && !batch.is_empty() {
            write_msg(control, &Control::Entries(std::mem::take(&mut batch)))?;
            batch_bytes = 0;
            match read_msg(control, reader, None)? {
                Control::Need(ids) => {
                    for id in ids {
                        if let Some(d) = data.remove(&id) {
                            queue.push(id, d);
                        }
                    }
                    queue.flush();
                    data.clear();
                }
                Control::Error { code, message } => {
                    return Err(Error::Remote {
                        side: "receiver",
                        message,
                        code,
                    })
                }
                other => {
                    return Err(
                        crate::protocol::ProtocolError::Unexpected(other.name().into()).into(),
                    )
                }
            }
        }
        if let Some(r) = end {
            return r;
        }
    }
}

/// One data stream: takes work until the queue is empty, then ends the stream.
fn data_worker(
    mut conn: Conn,
    queue: &WorkQueue,
    key: [u8; 32],
    opts: &SendOptions,
    counters: &Counters,
    failures: &Mutex<Failures>,
) -> Result<()> {
    let mut raw: Vec<u8> = Vec::with_capacity(opts.block_size as usize);
    let mut cbuf = Vec::new();
    let mut hdr = Vec::new();
    let mut segs: Vec<Segment> = Vec::new();
    let mut enc = Encoder::new(opts.compress);
    let mut open: Option<(u64, File)> = None;
    let fail = |id: u64, path: &PathBuf, e: io::Error| {
        if let Ok(mut f) = failures.lock() {
            if f.ids.insert(id) {
                crate::progress::warn(&format!("cannot read {}: {e}", path.display()));
                f.list.push((path.clone(), e));
            }
        }
    };
    let is_failed = |id: u64| failures.lock().map(|f| f.ids.contains(&id)).unwrap_or(true);
    while let Some(work) = queue.next() {
        raw.clear();
        segs.clear();
        match work {
            Work::Block { file, offset, len } => {
                if is_failed(file.id) {
                    continue;
                }
                if open.as_ref().map(|(id, _)| *id) != Some(file.id) {
                    open = match File::open(&file.path) {
                        Ok(f) => Some((file.id, f)),
                        Err(e) => {
                            fail(file.id, &file.path, e);
                            continue;
                        }
                    };
                }
                let Some((_, f)) = open.as_ref() else {
                    continue;
                };
                raw.resize(len as usize, 0);
                if let Err(e) = f.read_exact_at(&mut raw, offset) {
                    fail(file.id, &file.path, shrink_hint(e));
                    continue;
                }
                segs.push(Segment {
                    file: file.id,
                    offset,
                    len,
                });
            }
            Work::Pack(files) => {
                for job in files {
                    let start = raw.len();
                    raw.resize(start + job.size as usize, 0);
                    let r =
                        File::open(&job.path).and_then(|f| f.read_exact_at(&mut raw[start..], 0));
                    match r {
                        Ok(()) => segs.push(Segment {
                            file: job.id,
                            offset: 0,
                            len: job.size as u32,
                        }),
                        Err(e) => {
                            raw.truncate(start);
                            fail(job.id, &job.path, shrink_hint(e));
                        }
                    }
                }
            }
        }
        if segs.is_empty() {
            continue;
        }
        let hash = unit_hash(&key, &raw);
        let codec = enc.encode(&raw, &mut cbuf);
        let body: &[u8] = if codec == crate::protocol::Codec::Raw {
            &raw
        } else {
            &cbuf
        };
        encode_data_header(&mut hdr, codec, raw.len() as u32, &hash, &segs, body.len());
        conn.write_all(&hdr).map_err(lost)?;
        conn.write_all(body).map_err(lost)?;
        Counters::add(&counters.done_bytes, raw.len() as u64);
        Counters::add(&counters.done_files, segs.len() as u64);
        Counters::add(&counters.wire_bytes, (hdr.len() + body.len()) as u64);
    }
    let mut end = Vec::new();
    encode_frame(&mut end, FrameKind::End, &[]);
    conn.write_all(&end).map_err(lost)?;
    conn.flush().map_err(lost)?;
    // The receiver may already have closed its end after reading End: the receiver's
    // final Done on the control stream is what confirms delivery, not this.
    let _ = conn.shutdown_write();
    Ok(())
}

fn shrink_hint(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(e.kind(), "file shrank while being read")
    } else {
        e
    }
}

/// Maps a stream failure to a transport error.
pub(crate) fn lost(e: io::Error) -> Error {
    Error::Transport(TransportError::Io(e))
}

/// Writes one control message.
pub(crate) fn write_msg(conn: &mut Conn, msg: &Control) -> Result<()> {
    let mut buf = Vec::new();
    msg.encode(&mut buf)?;
    conn.write_all(&buf).map_err(lost)?;
    conn.flush().map_err(lost)
}

/// Reads one control message; `timeout` None blocks. A peer that closes the stream is
/// reported as gone.
pub(crate) fn read_msg(
    conn: &mut Conn,
    reader: &mut FrameReader,
    timeout: Option<Duration>,
) -> Result<Control> {
    conn.set_read_timeout(timeout).map_err(lost)?;
    match reader.read_frame(conn) {
        Ok(Some(f)) if f.kind == FrameKind::Control => Ok(Control::decode(f.payload)?),
        Ok(Some(_)) => Err(crate::protocol::ProtocolError::Unexpected(
            "non-control frame on the control stream".into(),
        )
        .into()),
        Ok(None) | Err(crate::protocol::ReadError::Truncated) => Err(lost(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the peer closed the connection",
        ))),
        Err(crate::protocol::ReadError::Io(e)) => Err(lost(e)),
        Err(crate::protocol::ReadError::Protocol(p)) => Err(p.into()),
    }
}

/// After a stream failed: did the receiver send an Error explaining why?
fn remote_reason(control: &mut Conn, reader: &mut FrameReader) -> Option<Error> {
    match read_msg(control, reader, Some(Duration::from_secs(2))) {
        Ok(Control::Error { code, message }) => Some(Error::Remote {
            side: "receiver",
            message,
            code,
        }),
        _ => None,
    }
}
