//! The options that say which destination files a transfer changes and how (rsync's
//! quick-check and transfer rules): syntax only, as the rest of `cli`.

use clap::Args;

/// How existing destination files are compared and which ones are left alone; shared by
/// `send` and `copy` (the receiver applies them).
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Compare block hashes of existing destination files even when size and mtime
    /// match (otherwise such files are skipped as unchanged).
    #[arg(short = 'c', long)]
    pub checksum: bool,
    /// Delete destination entries that do not exist at the source (inside the
    /// directories sent; never outside the destination).
    #[arg(long)]
    pub delete: bool,
    /// --delete, and also delete at the destination what the filters exclude (rsync's).
    #[arg(long)]
    pub delete_excluded: bool,
    /// Show what would change (with -v or -i, each change) but send, create, write and
    /// delete nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Update changed destination files in place instead of building a new copy and
    /// renaming it (saves space and I/O; an interrupted run leaves a mixed file).
    #[arg(long)]
    pub inplace: bool,
    /// Skip files whose destination copy is newer (whole seconds, as rsync); an equal
    /// mtime with another size is still updated (rsync's -u).
    #[arg(short = 'u', long)]
    pub update: bool,
    /// Create nothing new at the destination: update only what it already has.
    #[arg(long, visible_alias = "ignore-non-existing")]
    pub existing: bool,
    /// Leave every file, link or special the destination already has as it is.
    #[arg(long)]
    pub ignore_existing: bool,
    /// A destination file of the source's size is up to date, whatever its mtime.
    #[arg(long)]
    pub size_only: bool,
}
