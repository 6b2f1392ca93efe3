//! Control messages: what travels on the control stream, encoded with postcard.
//!
//! postcard gives a fixed, documented encoding (varints, length-prefixed sequences) and
//! never pre-allocates more than the input can hold, so a hostile length cannot make us
//! allocate beyond the frame bound checked in `frame`.
//!
//! The receiver cuts its `Arrived` lists into messages of at most 65,536 ids
//! (`receive::listing`).

use serde::{Deserialize, Serialize};

use super::item::Item;
use super::limits::{CONTROL_MAC_LEN, MAX_CONTROL_LEN};
use super::seal::Sealer;
use super::xattr::Xattrs;
use super::ProtocolError;

/// One message on the control stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Sender → receiver, first: how the transfer will run.
    Start {
        /// How many data streams the sender will open.
        streams: u16,
        /// Block size in bytes (files are cut at multiples of it).
        block_size: u32,
        /// What the receiver should do with what it already has.
        options: SyncOptions,
    },
    /// Sender → receiver: a batch of the manifest, in walk order (parents before children).
    Entries(Vec<Entry>),
    /// Receiver → sender, answering one `Entries`: the regular files whose data the
    /// receiver wants, and how much of it. Files not listed are already there.
    Need(Vec<Want>),
    /// Sender → receiver: forget these files (they changed while being read and will be
    /// sent again under new ids); data still in flight for them is ignored.
    Forget(Vec<u64>),
    /// Sender → receiver: the manifest is complete and every needed unit has been sent.
    Finish {
        /// Files the sender could not read; the receiver discards their partial data.
        failed: Vec<u64>,
        /// Source entries the sender's walk could not read (a dangling symlink under
        /// `-L`, a directory it may not list): not in the manifest, so without ids, but
        /// failed all the same. The receiver counts them with `failed` and exits 23 as
        /// the sender does (rsync's both ends agree on a partial transfer).
        unlisted: u64,
        /// Data frames the sender has written in all (so the receiver knows when none
        /// are still in flight). The receiver answers `Done`, or `Need` with what is
        /// still missing (lost with a dropped connection), after which Finish follows
        /// again.
        units: u64,
    },
    /// Receiver → sender: every file is verified and durable.
    Done(Summary),
    /// Either way: the transfer is over because of this error.
    Error {
        /// Exit-code class (see `error::exit`).
        code: i32,
        /// One line for the user.
        message: String,
    },
    /// Sender → receiver, first on a pipe transfer (instead of `Start`): one byte stream,
    /// cut into blocks of `block_size` bytes (the last may be shorter) at offsets that are
    /// multiples of it; each block is one data unit with one segment of file 0.
    StreamStart {
        /// How many data streams the sender will open.
        streams: u16,
        /// Block size in bytes.
        block_size: u32,
        /// Most stream bytes the sender holds (read, not yet arrived).
        window: u64,
        /// A chain fan-out: the receivers this one passes the stream on to (empty for
        /// one receiver; see `chain`). Repeated on a reconnect, where it is ignored.
        chain: Chain,
    },
    /// Receiver → sender: `written` bytes are with the consumer, every byte before `have`
    /// has arrived; blocks may be in flight up to `written + window` (the smaller of both
    /// sides' windows). Sent at once for each `StreamStart`, then as the numbers move.
    StreamAck {
        /// Bytes handed to the consumer, in order.
        written: u64,
        /// Bytes arrived without a gap (`>= written`).
        have: u64,
        /// Bytes the sender may have in flight beyond `written`.
        window: u64,
    },
    /// Receiver → sender: a data connection broke. Of the blocks from `have` on, only
    /// those at these offsets arrived; the sender sends the others again.
    StreamLost {
        /// Bytes arrived without a gap.
        have: u64,
        /// Offsets of the blocks held beyond `have`.
        got: Vec<u64>,
    },
    /// Sender → receiver on a pipe transfer with nothing else to say for a while (a
    /// producer that has not written yet, e.g. a backup tool waiting for a checkpoint):
    /// the sender is still there. The receiver answers nothing; its acknowledgements,
    /// repeated while nothing moves, are the same sign of life the other way. In file
    /// mode, receiver → sender (or relay) every second while busy on an answer: it is
    /// still working on it.
    Keepalive,
    /// Sender → receiver: the stream ended after `len` bytes, whose BLAKE3 is `digest`.
    /// The receiver answers `Done` once every byte is with the consumer (and, for a
    /// file, durable), or `Error`.
    StreamEnd {
        /// Length of the whole stream.
        len: u64,
        /// BLAKE3 of the whole stream.
        digest: [u8; 32],
    },
    /// Sender → receiver, after `Start`, only with `--delete` and filter rules: the
    /// rules; `--delete` keeps destination entries they exclude (rsync's default).
    Protect(super::Filter),
    /// Receiver → sender, when `SyncOptions::items` asked for it: what changed at the
    /// destination (for `-v`/`-i`), sent before the `Need` answering a batch and before
    /// `Done` (deletions). The sender prints them and keeps waiting for its answer.
    Items(Vec<Item>),
    /// Sender → receiver, after `Start` (and before `Protect`), only for a chain fan-out:
    /// the receivers this one passes the transfer on to (see `chain`).
    Chain(Chain),
    /// Receiver → sender, before `Done`, only for a chain fan-out: what became of every
    /// receiver after this one (all known so far: each replaces the one before). A
    /// tree's relay also sends it as soon as a hop after it fails, before its answer to
    /// any later batch, so the sender never takes that hop for one in step.
    Replicas(Vec<Replica>),
    /// Receiver → sender: files whose every byte has arrived since the last `Arrived`,
    /// sent before the answer to `Entries` or `Finish`. They are never asked for again, so
    /// the sender forgets them: what it remembers per file lasts only while the file is on
    /// its way.
    Arrived(Vec<u64>),
    /// Prober → receiver, first and only on a probe's control stream (`haul probe
    /// --to TICKET`): measure the destination, then count what `streams` probe data
    /// streams carry. The receiver answers `ProbeReady`, then `Probed` (or `Error`).
    Probe {
        /// How many probe data streams will follow `ProbeReady`.
        streams: u16,
    },
    /// Receiver → prober: the destination is measured (nothing was left there); the
    /// prober opens its data streams now.
    ProbeReady {
        /// Durable write rate in the destination directory, bytes per second.
        write_rate: Option<u64>,
        /// Microseconds each small file costs there (create, write, fsync, close).
        file_micros: Option<u64>,
    },
    /// Receiver → prober: what the probe data streams carried.
    Probed {
        /// Bytes, over all streams.
        received: u64,
        /// Microseconds from the first byte to the last.
        micros: u64,
    },
    /// Receiver → sender, right before `Done`, when its chain carried a nonce (every
    /// receiver of a chain fan-out): its proof of that outcome (`vouch::proof`, under its
    /// own ticket's outcome key), which a relay passes on in the hop's `Replica`.
    Proof([u8; 32]),
}

/// The receivers a receiver passes the transfer on to, nearest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    /// Nearest first; at most `chain::MAX_CHAIN`.
    pub hops: Vec<Hop>,
    /// Whether the data streams between hops use TLS (as the sender's do).
    pub encrypt: bool,
    /// The sender's fresh number for this run, which every receiver of the chain binds
    /// its proof to (`Control::Proof`); the last hop gets a `Chain` without hops for it.
    pub nonce: Option<[u8; 32]>,
}

/// One further receiver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// How messages name it: the host as the user named it, or the ticket's first address.
    pub label: String,
    /// Its ticket: as `haul recv` printed it where the sender keeps it, its hop ticket
    /// (`Ticket::for_hop`, which cannot vouch for it) in every `Chain` sent.
    pub ticket: String,
}

/// What became of one receiver after the first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// The hop's label.
    pub host: String,
    /// Its summary, or why it failed.
    pub outcome: Outcome,
    /// A `Done` heard from the hop before it: the hop's own proof of it (its
    /// `Control::Proof`), without which the sender counts it failed.
    pub proof: Option<[u8; 32]>,
}

/// A replica's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Complete and durable.
    Done(Summary),
    /// Failed (the chain went on without it): its exit-code class and one line.
    Failed {
        /// Exit-code class (see `error::exit`).
        code: i32,
        /// What went wrong.
        message: String,
    },
}

/// How the receiver treats files it already has (set by the sender's user).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncOptions {
    /// Compare block hashes even when size and mtime match (rsync's `--checksum`).
    pub checksum: bool,
    /// Update existing files in place instead of building a new copy.
    pub inplace: bool,
    /// Remove destination entries that are not in the source.
    pub delete: bool,
    /// `--dry-run`: answer the manifest with what a real run would do (no data is wanted)
    /// and create, write or delete nothing.
    pub dry_run: bool,
    /// Send `Control::Items` (what changes, for the sender's `-v`/`-i`).
    pub items: bool,
    /// rsync's transfer rules: which destination entries are left as they are.
    pub rules: Rules,
}

/// rsync's transfer rules, applied by the receiver (the one side that sees the
/// destination): an entry they skip is neither written nor listed nor deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// `-u`: leave a regular file whose destination is a regular file with a later mtime
    /// (whole seconds, as rsync compares them).
    pub update: bool,
    /// `--existing`: create nothing that the destination lacks.
    pub existing: bool,
    /// `--ignore-existing`: leave every entry the destination has (a directory still
    /// has its contents looked at).
    pub ignore_existing: bool,
    /// `--size-only`: a regular file of the same size is up to date, whatever its mtime.
    pub size_only: bool,
}

impl Rules {
    /// Whether any rule is set (then each entry's destination is looked at first).
    pub fn any(&self) -> bool {
        self.update || self.existing || self.ignore_existing
    }
}

/// What the receiver wants of one regular file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Want {
    /// The file's manifest id.
    pub id: u64,
    /// Which part of it.
    pub what: WantKind,
}

/// How much of a file the receiver wants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WantKind {
    /// Every data byte.
    All,
    /// Only these `(start, end)` ranges (sorted, disjoint): an earlier run's partial file
    /// already holds the rest, durably (resume).
    Ranges(Vec<(u64, u64)>),
    /// The receiver holds an older version: the keyed hash (first 16 bytes) of each
    /// `chunk`-sized piece of it. Send only pieces whose hash differs; mark the rest KEEP.
    Delta {
        /// Bytes per hashed piece.
        chunk: u32,
        /// One hash per piece of the old content, in order.
        hashes: Vec<[u8; 16]>,
    },
}

/// The receiver's account of a finished transfer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Regular files written (new or changed).
    pub files: u64,
    /// Directories, symlinks, hardlinks and special files created.
    pub other: u64,
    /// Raw file bytes written from the wire.
    pub bytes: u64,
    /// Entries skipped with a warning (e.g. sockets, devices when not root).
    pub skipped: u64,
    /// Files already up to date (same size and mtime, or same hashes with --checksum).
    pub unchanged_files: u64,
    /// Bytes not sent because the receiver already had them (unchanged files, matching
    /// delta pieces, blocks of an earlier run).
    pub unchanged_bytes: u64,
    /// Entries removed by --delete.
    pub deleted: u64,
    /// Bytes of files sent that were not sent: matching delta pieces, resumed ranges
    /// (part of `unchanged_bytes`).
    pub matched: u64,
    /// A dry run: `files` and `deleted` say what a real run would do; nothing changed.
    pub dry_run: bool,
    /// Files an earlier run had begun that this one completed (resume), so that the
    /// sender across the network says "resumed" as a copy on one host does.
    pub resumed_files: u64,
    /// Bytes of those files the earlier run had left, kept (part of `matched`).
    pub resumed_bytes: u64,
    /// The lengths of the files written (`files`), holes included: rsync's "Total
    /// transferred file size".
    pub transferred_size: u64,
}

/// One manifest entry: a path and what to create there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Unique within the transfer; data segments name files by it.
    pub id: u64,
    /// Path relative to the destination root, `/`-separated raw bytes (parsed by the
    /// receiver into a `SafeRelPath`); empty means the root itself.
    pub path: Vec<u8>,
    /// What the entry is.
    pub kind: EntryKind,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Owner, applied when the receiver runs as root.
    pub uid: u32,
    /// Group, applied when the receiver runs as root.
    pub gid: u32,
    /// Extended attributes (ACLs, labels, capabilities, `user.*`) of a regular file,
    /// directory or symlink; `None` when the sender does not send them (`--no-xattrs`, or
    /// another kind of entry): the receiver then leaves the destination's as they are.
    pub xattrs: Option<Xattrs>,
    /// `--checksum`: a regular file's content hash (`codec::content_hash`), taken by the
    /// sender's walk; `None` otherwise (or when it could not be read: then it is sent).
    pub checksum: Option<[u8; 32]>,
}

/// The kinds of entry a manifest can hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        /// Its length.
        size: u64,
        /// Bytes outside holes, i.e. how many raw bytes its data units will carry.
        data_bytes: u64,
    },
    /// A symbolic link, never followed.
    Symlink {
        /// The link's target bytes, as stored.
        target: Vec<u8>,
    },
    /// A second name of a file sent earlier in this transfer.
    Hardlink {
        /// The earlier file's path (same form as `Entry::path`).
        target: Vec<u8>,
    },
    /// A named pipe.
    Fifo,
    /// A character or block device (recreated only by root).
    Device {
        /// Block device (else character).
        block: bool,
        /// Device number.
        rdev: u64,
    },
}

impl Control {
    /// Appends this message as one control frame, sealed by `sealer`.
    pub fn encode(&self, sealer: &mut Sealer, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        let payload =
            postcard::to_stdvec(self).map_err(|e| ProtocolError::Control(e.to_string()))?;
        if payload.len() + CONTROL_MAC_LEN > MAX_CONTROL_LEN {
            return Err(ProtocolError::TooLong {
                what: "control message",
                len: payload.len() as u64,
                max: (MAX_CONTROL_LEN - CONTROL_MAC_LEN) as u64,
            });
        }
        sealer.control(&payload, out);
        Ok(())
    }

    /// Decodes a control frame's payload; trailing bytes are an error.
    pub fn decode(payload: &[u8]) -> Result<Control, ProtocolError> {
        let (msg, rest) = postcard::take_from_bytes(payload)
            .map_err(|e| ProtocolError::Control(e.to_string()))?;
        if !rest.is_empty() {
            return Err(ProtocolError::Control("trailing bytes".into()));
        }
        Ok(msg)
    }

    /// A short name for error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Control::Start { .. } => "Start",
            Control::Entries(_) => "Entries",
            Control::Need(_) => "Need",
            Control::Forget(_) => "Forget",
            Control::Finish { .. } => "Finish",
            Control::Done(_) => "Done",
            Control::Error { .. } => "Error",
            Control::StreamStart { .. } => "StreamStart",
            Control::StreamAck { .. } => "StreamAck",
            Control::StreamLost { .. } => "StreamLost",
            Control::StreamEnd { .. } => "StreamEnd",
            Control::Items(_) => "Items",
            Control::Keepalive => "Keepalive",
            Control::Protect(_) => "Protect",
            Control::Chain(_) => "Chain",
            Control::Replicas(_) => "Replicas",
            Control::Arrived(_) => "Arrived",
            Control::Probe { .. } => "Probe",
            Control::ProbeReady { .. } => "ProbeReady",
            Control::Probed { .. } => "Probed",
            Control::Proof(_) => "Proof",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FrameReader, Opener};
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let msgs = vec![
            Control::Start {
                streams: 4,
                block_size: 4 << 20,
                options: SyncOptions::default(),
            },
            Control::Entries(vec![Entry {
                id: 3,
                path: b"a/b\n\xff".to_vec(),
                kind: EntryKind::File {
                    size: 1 << 33,
                    data_bytes: 12,
                },
                mode: 0o644,
                mtime_sec: -5,
                mtime_nsec: 999_999_999,
                uid: 0,
                gid: 7,
                xattrs: None,
                checksum: None,
            }]),
            Control::Need(vec![
                Want {
                    id: 1,
                    what: WantKind::All,
                },
                Want {
                    id: 2,
                    what: WantKind::Ranges(vec![(0, 5), (9, 12)]),
                },
                Want {
                    id: u64::MAX,
                    what: WantKind::Delta {
                        chunk: 16384,
                        hashes: vec![[7; 16]; 3],
                    },
                },
            ]),
            Control::Forget(vec![4]),
            Control::Arrived(vec![0, 7, u64::MAX]),
            Control::Probe { streams: 64 },
            Control::ProbeReady {
                write_rate: Some(400 << 20),
                file_micros: None,
            },
            Control::Probed {
                received: 1 << 33,
                micros: 3_000_000,
            },
            Control::Finish {
                failed: vec![],
                units: 3,
                unlisted: 2,
            },
            Control::Done(Summary::default()),
            Control::Error {
                code: 4,
                message: "disk full".into(),
            },
            Control::StreamStart {
                streams: 8,
                block_size: 4 << 20,
                window: 64 << 20,
                chain: Chain {
                    hops: vec![Hop {
                        label: "db2".into(),
                        ticket: "haul1-x".into(),
                    }],
                    encrypt: true,
                    nonce: None,
                },
            },
            Control::StreamAck {
                written: 1 << 40,
                have: (1 << 40) + 5,
                window: 1 << 26,
            },
            Control::StreamLost {
                have: 8,
                got: vec![16, 48],
            },
            Control::StreamEnd {
                len: 0,
                digest: [3; 32],
            },
            Control::Keepalive,
            Control::Protect(
                vec![super::super::FilterRule {
                    include: false,
                    pattern: b"pg_replslot/*".to_vec(),
                }]
                .into(),
            ),
        ];
        let mut sealer = Sealer::new([9; 32], false);
        let mut reader = FrameReader::new(Opener::new([9; 32], true));
        for m in msgs {
            let mut out = Vec::new();
            m.encode(&mut sealer, &mut out).unwrap();
            let mut src: &[u8] = &out;
            let f = reader.read_frame(&mut src).unwrap().unwrap();
            assert_eq!(Control::decode(f.payload).unwrap(), m);
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Control::decode(&bytes);
        }

        /// A probe's messages survive the wire whatever their numbers, and any prefix of
        /// one (a cut-off frame) is an error, never a different message.
        #[test]
        fn probe_messages_round_trip(
            streams in any::<u16>(),
            write_rate in proptest::option::of(any::<u64>()),
            file_micros in proptest::option::of(any::<u64>()),
            received in any::<u64>(),
            micros in any::<u64>(),
        ) {
            for m in [
                Control::Probe { streams },
                Control::ProbeReady { write_rate, file_micros },
                Control::Probed { received, micros },
            ] {
                let bytes = postcard::to_stdvec(&m).unwrap();
                prop_assert_eq!(Control::decode(&bytes).unwrap(), m);
                for cut in 0..bytes.len() {
                    prop_assert!(Control::decode(&bytes[..cut]).is_err());
                }
            }
        }
    }

    #[test]
    fn probe_messages_have_a_fixed_encoding() {
        // The fuzz seeds `probe`, `probe-ready` and `probed` are these bytes.
        assert_eq!(
            Control::decode(&[17, 4]).unwrap(),
            Control::Probe { streams: 4 }
        );
        assert_eq!(
            Control::decode(&[18, 1, 0x80, 0x80, 0x80, 0xc8, 0x01, 1, 0xdc, 0x0b]).unwrap(),
            Control::ProbeReady {
                write_rate: Some(400 << 20),
                file_micros: Some(1500),
            }
        );
        assert_eq!(
            Control::decode(&[19, 0x80, 0x80, 0x80, 0x80, 0x0c, 0xf0, 0x86, 0xb4, 0x01]).unwrap(),
            Control::Probed {
                received: 3 << 30,
                micros: 2_950_000,
            }
        );
    }

    #[test]
    fn huge_claimed_length_does_not_allocate() {
        // Variant 1 (Entries) followed by a varint claiming 2^63 elements.
        let bytes = [1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Control::decode(&bytes).is_err());
    }
}
