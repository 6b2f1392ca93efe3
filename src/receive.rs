//! The receiver driver: answers the manifest on the control connection and runs one
//! blocking worker per data connection (frame → decompress → verify → pwrite).
//!
//! Every failure ends the transfer with one `Control::Error` to the sender (so it can say
//! why), after which all connections are dropped; partial files stay for a later run.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::codec::Decoder;
use crate::error::{Error, Result};
use crate::progress::{Counters, Progress};
use crate::protocol::{
    Control, DataHeader, EntryKind, FrameKind, FrameReader, ProtocolError, ReadError, Summary,
    MAX_BLOCK,
};
use crate::send::{lost, read_msg, write_msg};
use crate::store::{Store, WriterCache};
use crate::transport::{Conn, Role};

/// How often blocked reads wake up to check whether the transfer was aborted.
const TICK: Duration = Duration::from_millis(200);
/// Most data streams a sender may ask for.
pub const MAX_STREAMS: u16 = 64;

/// What the receiver reports at the end.
#[derive(Debug)]
pub struct ReceiveReport {
    /// What was written.
    pub summary: Summary,
    /// How many files the sender could not read (they were not written).
    pub sender_failed: u64,
    /// Counters for the summary line.
    pub counters: Arc<Counters>,
    /// When the first connection arrived.
    pub started: Instant,
}

impl ReceiveReport {
    /// The account `--json` prints.
    pub fn report(&self) -> crate::progress::Report {
        crate::progress::Report {
            files: self.summary.files,
            files_unchanged: self.summary.unchanged_files,
            bytes_read: 0,
            bytes_wire: self.counters.wire_bytes.load(Ordering::Relaxed),
            bytes_skipped: self.summary.unchanged_bytes,
            bytes_written: self.summary.bytes,
            deleted: self.summary.deleted,
            failed_files: self.sender_failed,
            changed_files: 0,
            reconnects: 0,
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

/// Serves one transfer into `store`. `incoming` yields authenticated connections; the
/// first control connection starts the transfer.
pub fn receive(
    store: Store,
    key: [u8; 32],
    incoming: Receiver<(Conn, Role)>,
    progress: bool,
) -> Result<ReceiveReport> {
    let mut early_data = Vec::new();
    let mut control = loop {
        match incoming.recv() {
            Ok((c, Role::Control)) => break c,
            Ok((c, Role::Data)) => early_data.push(c),
            Err(_) => {
                return Err(lost(io::Error::other("no sender connected")));
            }
        }
    };
    let started = Instant::now();
    let mut reader = FrameReader::new();
    let (streams, block_size, options) = match read_msg(&mut control, &mut reader, None)? {
        Control::Start {
            streams,
            block_size,
            options,
        } => (streams, block_size, options),
        other => return Err(ProtocolError::Unexpected(other.name().into()).into()),
    };
    if streams == 0 || streams > MAX_STREAMS || block_size < 4096 || block_size as usize > MAX_BLOCK
    {
        return Err(ProtocolError::Malformed("stream count or block size out of range").into());
    }
    store.configure(u64::from(block_size), options, key);
    let store = Arc::new(store);
    store.start();
    let counters = Arc::clone(&store.stats);
    let bar = Progress::start(Arc::clone(&counters), progress);
    let abort = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Result<()>>();

    // Data connections: those that came early, then the rest as they arrive.
    {
        let (store, abort, done_tx) = (Arc::clone(&store), Arc::clone(&abort), done_tx.clone());
        std::thread::Builder::new()
            .name("haul-accept-data".into())
            .spawn(move || {
                let mut started = 0u16;
                let spawn = |conn: Conn, i: u16| {
                    let (store, abort, tx) =
                        (Arc::clone(&store), Arc::clone(&abort), done_tx.clone());
                    let r = std::thread::Builder::new()
                        .name(format!("haul-recv-{i}"))
                        .spawn(move || {
                            let r = data_worker(conn, &store, key, &abort);
                            if r.is_err() {
                                abort.store(true, Ordering::Relaxed);
                            }
                            let _ = tx.send(r);
                        });
                    if r.is_err() {
                        let e =
                            Error::io("starting a stream thread", io::Error::other("spawn failed"));
                        let _ = done_tx.send(Err(e));
                    }
                };
                for c in early_data {
                    if started < streams {
                        spawn(c, started);
                        started += 1;
                    }
                }
                while started < streams && !abort.load(Ordering::Relaxed) {
                    match incoming.recv_timeout(TICK) {
                        Ok((c, Role::Data)) => {
                            spawn(c, started);
                            started += 1;
                        }
                        Ok((_, Role::Control)) => {
                            crate::progress::warn("ignored a second control connection");
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
            .map_err(|e| Error::io("starting the accept thread", e))?;
    }
    drop(done_tx);

    let result = control_loop(
        &mut control,
        &mut reader,
        &store,
        &counters,
        &abort,
        &done_rx,
        streams,
    );
    abort.store(true, Ordering::Relaxed);
    bar.finish();
    match result {
        Ok((summary, sender_failed)) => {
            let _ = write_msg(&mut control, &Control::Done(summary.clone()));
            let _ = control.shutdown_write();
            Ok(ReceiveReport {
                summary,
                sender_failed,
                counters,
                started,
            })
        }
        Err(e) => {
            // Whatever stopped us, what is durable now is kept for the next run.
            store.save_progress();
            if !matches!(e, Error::Transport(_)) {
                let _ = write_msg(
                    &mut control,
                    &Control::Error {
                        code: e.exit_code(),
                        message: e.to_string(),
                    },
                );
                // Let the sender read the error before the connection goes away.
                let _ = control.shutdown_write();
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    match read_msg(&mut control, &mut reader, Some(TICK)) {
                        Ok(_) => {}
                        Err(Error::Transport(crate::transport::TransportError::Io(ref x)))
                            if matches!(
                                x.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) => {}
                        Err(_) => break,
                    }
                }
            }
            Err(e)
        }
    }
}

/// Handles manifest batches until Finish; returns the summary and the sender's failures.
fn control_loop(
    control: &mut Conn,
    reader: &mut FrameReader,
    store: &Arc<Store>,
    counters: &Counters,
    abort: &AtomicBool,
    done_rx: &Receiver<Result<()>>,
    streams: u16,
) -> Result<(Summary, u64)> {
    let mut finished_streams = 0u16;
    loop {
        // A data stream failed, or a finisher did: stop now.
        while let Ok(r) = done_rx.try_recv() {
            r?;
            finished_streams += 1;
        }
        if let Some(e) = store.take_error() {
            return Err(e);
        }
        let msg = match read_msg(control, reader, Some(TICK)) {
            Ok(m) => m,
            Err(Error::Transport(crate::transport::TransportError::Io(ref x)))
                if matches!(
                    x.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(Error::Transport(_)) => {
                return Err(lost(io::Error::other(
                    "the sender vanished mid-transfer (killed, or the network dropped)",
                )))
            }
            Err(e) => return Err(e),
        };
        match msg {
            Control::Entries(entries) => {
                for e in &entries {
                    if let EntryKind::File { data_bytes, .. } = e.kind {
                        Counters::add(&counters.total_files, 1);
                        Counters::add(&counters.total_bytes, data_bytes);
                    }
                }
                let need = store.apply_entries(entries)?;
                write_msg(control, &Control::Need(need))?;
            }
            Control::Forget(ids) => store.discard(&ids)?,
            Control::Finish { failed } => {
                store.discard(&failed)?;
                while finished_streams < streams {
                    if abort.load(Ordering::Relaxed) && done_rx.is_empty() {
                        return Err(lost(io::Error::other("a data stream was lost")));
                    }
                    match done_rx.recv_timeout(TICK) {
                        Ok(r) => {
                            r?;
                            finished_streams += 1;
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(lost(io::Error::other("data streams ended early")))
                        }
                    }
                }
                let summary = store.finish()?;
                return Ok((summary, failed.len() as u64));
            }
            Control::Error { code, message } => {
                return Err(Error::Remote {
                    side: "sender",
                    message,
                    code,
                })
            }
            other => return Err(ProtocolError::Unexpected(other.name().into()).into()),
        }
    }
}

/// One data stream: verified units into the store until the End frame.
fn data_worker(mut conn: Conn, store: &Store, key: [u8; 32], abort: &AtomicBool) -> Result<()> {
    conn.set_read_timeout(Some(TICK)).map_err(lost)?;
    let mut reader = FrameReader::new();
    let mut decoder = Decoder::new(key);
    let mut cache = WriterCache::default();
    loop {
        let frame = match reader.read_frame(&mut conn) {
            Ok(Some(f)) => f,
            Ok(None) | Err(ReadError::Truncated) => {
                return Err(lost(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the sender vanished mid-transfer (killed, or the network dropped)",
                )))
            }
            Err(e) if e.is_timeout() => {
                if abort.load(Ordering::Relaxed) {
                    return Ok(());
                }
                continue;
            }
            Err(ReadError::Io(e)) => return Err(lost(e)),
            Err(ReadError::Protocol(p)) => return Err(p.into()),
        };
        match frame.kind {
            FrameKind::End => return Ok(()),
            FrameKind::Control => {
                return Err(
                    ProtocolError::Unexpected("control frame on a data stream".into()).into(),
                )
            }
            FrameKind::Data => {}
        }
        let h = DataHeader::parse(frame.payload)?;
        Counters::add(&store.stats.wire_bytes, frame.payload.len() as u64);
        let unit = match decoder.decode(&h) {
            Ok(u) => u,
            Err(_) => {
                let seg = h.segments().next();
                return Err(Error::BlockHashMismatch {
                    file: seg.map(|s| store.describe(s.file)).unwrap_or_default(),
                    offset: seg.map(|s| s.offset).unwrap_or(0),
                });
            }
        };
        store.write_unit(&unit, h.segments(), &mut cache)?;
    }
}
