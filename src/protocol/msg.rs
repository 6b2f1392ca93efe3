//! Control messages: what travels on the control stream, encoded with postcard.
//!
//! postcard gives a fixed, documented encoding (varints, length-prefixed sequences) and
//! never pre-allocates more than the input can hold, so a hostile length cannot make us
//! allocate beyond the frame bound checked in `frame`.

use serde::{Deserialize, Serialize};

use super::frame::{encode_frame, FrameKind, MAX_CONTROL_LEN};
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
    },
    /// Sender → receiver: a batch of the manifest, in walk order (parents before children).
    Entries(Vec<Entry>),
    /// Receiver → sender, answering one `Entries`: the ids of regular files whose data
    /// the receiver wants.
    Need(Vec<u64>),
    /// Sender → receiver: the manifest is complete and every needed unit has been sent.
    Finish {
        /// Files the sender could not read; the receiver discards their partial data.
        failed: Vec<u64>,
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
}

/// The receiver's account of a finished transfer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Regular files written.
    pub files: u64,
    /// Directories, symlinks, hardlinks and special files created.
    pub other: u64,
    /// Raw file bytes written.
    pub bytes: u64,
    /// Entries skipped with a warning (e.g. sockets, devices when not root).
    pub skipped: u64,
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
    /// Appends this message as one control frame.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), ProtocolError> {
        let payload =
            postcard::to_stdvec(self).map_err(|e| ProtocolError::Control(e.to_string()))?;
        if payload.len() > MAX_CONTROL_LEN {
            return Err(ProtocolError::TooLong {
                what: "control message",
                len: payload.len() as u64,
                max: MAX_CONTROL_LEN as u64,
            });
        }
        encode_frame(out, FrameKind::Control, &payload);
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
            Control::Finish { .. } => "Finish",
            Control::Done(_) => "Done",
            Control::Error { .. } => "Error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::decode_frame;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let msgs = vec![
            Control::Start {
                streams: 4,
                block_size: 4 << 20,
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
            }]),
            Control::Need(vec![1, 2, u64::MAX]),
            Control::Finish { failed: vec![] },
            Control::Done(Summary::default()),
            Control::Error {
                code: 4,
                message: "disk full".into(),
            },
        ];
        for m in msgs {
            let mut out = Vec::new();
            m.encode(&mut out).unwrap();
            let (f, _) = decode_frame(&out).unwrap().unwrap();
            assert_eq!(Control::decode(f.payload).unwrap(), m);
        }
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Control::decode(&bytes);
        }
    }

    #[test]
    fn huge_claimed_length_does_not_allocate() {
        // Variant 1 (Entries) followed by a varint claiming 2^63 elements.
        let bytes = [1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(Control::decode(&bytes).is_err());
    }
}
