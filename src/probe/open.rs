//! Opening a file the probe's walk picked, to read a sample of it: beneath its source
//! root and only when it is a regular file (the sender's rule: `plan::beneath`).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use rustix::fs::OFlags;

use crate::plan::beneath::Within;
use crate::plan::meta::Meta;

/// Opens a sampled file to read (with `O_DIRECT` if `direct`): beneath its source root,
/// following no symlink on the way or at the end, and only when what is there now is a
/// regular file. It is looked at through an `O_PATH` descriptor first, which opens
/// nothing: a device node or FIFO moved in since the walk is never opened for reading
/// (opening some devices acts: `/dev/watchdog` arms). The file is then opened through
/// that descriptor's `/proc/self/fd` link: the inode just checked, not a name.
pub(super) fn open_regular(at: &Within, direct: bool) -> Option<File> {
    let held = at.open(OFlags::PATH).ok()?;
    if !Meta::of_fd(&held).ok()?.is_file() {
        return None;
    }
    let flags = libc::O_NONBLOCK | if direct { libc::O_DIRECT } else { 0 };
    OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(format!("/proc/self/fd/{}", held.as_raw_fd()))
        .ok()
}
