//! The receiver's part in `-v`, `-i` and `--stats`: counting the manifest, and cutting the
//! items a sender asked for into `Items` messages (and the files that arrived into
//! `Arrived` messages). Printing is the driver's.

use crate::progress::Counters;
use crate::protocol::{Control, Entry, EntryKind, Item};

/// Names per `Items` message, in bytes: far below the control message bound.
const ITEMS_BYTES: usize = 1 << 20;
/// Ids per `Arrived` message: at most 10 bytes each, far below the control message bound.
const ARRIVED_IDS: usize = 1 << 16;

/// Counts a manifest batch for the progress bar and `--stats`.
pub(super) fn count_entries(counters: &Counters, entries: &[Entry]) {
    for e in entries {
        Counters::add(&counters.entries, 1);
        match e.kind {
            EntryKind::File { size, data_bytes } => {
                Counters::add(&counters.total_files, 1);
                Counters::add(&counters.total_bytes, data_bytes);
                Counters::add(&counters.file_size, size);
            }
            EntryKind::Dir => Counters::add(&counters.dirs, 1),
            // Its length is added when the store makes it (`Store::make_hardlink`).
            EntryKind::Hardlink { .. } => Counters::add(&counters.links, 1),
            // rsync's total size counts a symlink's length too.
            EntryKind::Symlink { ref target } => {
                Counters::add(&counters.file_size, target.len() as u64)
            }
            _ => {}
        }
    }
}

/// `items` as `Items` messages of at most about `ITEMS_BYTES` each (none for none).
pub(super) fn messages(items: Vec<Item>) -> Vec<Control> {
    let mut out = Vec::new();
    let (mut batch, mut bytes) = (Vec::new(), 0);
    for i in items {
        bytes += i.path.len() + i.target.len() + 16;
        batch.push(i);
        if bytes > ITEMS_BYTES {
            out.push(Control::Items(std::mem::take(&mut batch)));
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        out.push(Control::Items(batch));
    }
    out
}

/// `ids` as `Arrived` messages of at most `ARRIVED_IDS` each (none for none).
pub(super) fn arrived(ids: Vec<u64>) -> Vec<Control> {
    ids.chunks(ARRIVED_IDS)
        .map(|c| Control::Arrived(c.to_vec()))
        .collect()
}
