//! Command-line syntax (clap). Only syntax is checked here; `config` turns these raw
//! arguments into a validated `Config`.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

mod habits;
mod object;
mod sst;
mod sync;
pub mod unsupported;

pub use habits::RsyncHabits;
pub use sst::SstArgs;
pub use sync::SyncArgs;

/// Move very large data between hosts over parallel, encrypted, verified streams.
#[derive(Debug, Parser)]
#[command(name = "haul", version, about, long_about = None, disable_help_flag = true)]
pub struct Cli {
    /// Print help (`-h` too, when it is the only option; with others `-h` is rsync's
    /// --human-readable).
    #[arg(long, global = true, action = ArgAction::Help)]
    help: Option<bool>,
    /// Print nothing but errors (and, for recv, the ticket).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// At the end, print the transfer's summary as one JSON object on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// List the entries sent, created and deleted, by name (as rsync -v).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// List every change in rsync's form, e.g. `>f.st...... path` (as rsync -i).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub itemize_changes: u8,
    /// At the end, print rsync-like totals (files, sizes, literal and matched data).
    #[arg(long, global = true)]
    pub stats: bool,
    /// Leave what haul reads and writes in the page cache (by default it drops the pages
    /// it brought in, once read or written back).
    #[arg(long, global = true)]
    pub keep_cache: bool,
    #[command(flatten)]
    pub rsync: RsyncHabits,
    /// What to do.
    #[command(subcommand)]
    pub command: CommandArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum CommandArgs {
    /// Receive one transfer into DIR: prints a ticket, waits for `haul send`. `haul recv -`
    /// receives one stream (`haul send -`) to standard output.
    Recv {
        /// Destination directory (created if missing); `-`: write the stream to stdout;
        /// with --stream, a file to write the stream to.
        #[arg(required_unless_present = "to_command", value_name = "DIR|FILE|-")]
        dir: Option<PathBuf>,
        /// Receive one stream into the file DIR|FILE names (replaced when complete).
        #[arg(long)]
        stream: bool,
        /// Receive one stream into the standard input of this command (run with sh -c);
        /// its exit status is the transfer's.
        #[arg(
            long,
            visible_alias = "exec",
            value_name = "COMMAND",
            conflicts_with = "dir"
        )]
        to_command: Option<String>,
        /// Address to listen on, ADDR or ADDR:PORT (default: all addresses, any port).
        #[arg(long, value_name = "ADDR[:PORT]")]
        listen: Option<String>,
        /// Also write the ticket to this file (mode 0600, replaced atomically).
        #[arg(long, value_name = "FILE")]
        ticket_file: Option<PathBuf>,
        /// Give up when the sender has been gone (no connection, no data) this many
        /// seconds (default 30); until then a dropped sender may reconnect.
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Pass the transfer on when the sender names receivers after this one (a chain
        /// fan-out, `send --to THIS --to NEXT`): this host then dials the addresses the
        /// sender's tickets name. Without it such a sender is refused.
        #[arg(long)]
        relay: bool,
        /// Accepted for symmetry with send and ignored: the sender chooses.
        #[arg(long, value_name = "N", hide = true)]
        streams: Option<usize>,
        #[command(flatten)]
        accept: AcceptArgs,
        /// Apply no extended attributes, whatever the sender sends (ACLs, SELinux labels,
        /// capabilities, user.*); the destination's are left as they are.
        #[arg(long)]
        no_xattrs: bool,
        /// Streams: memory for blocks waiting their turn (default 64M, at most 256M).
        #[arg(long, value_name = "SIZE")]
        buffer: Option<String>,
        /// `-` on a terminal: write the stream there anyway (refused otherwise, as zstd
        /// does; no -f, which is rsync's --filter).
        #[arg(long)]
        force: bool,
    },
    /// Send files and directories to a waiting `haul recv`; `haul send -` sends standard
    /// input as one stream.
    Send {
        /// Files or directories; `dir/` sends the contents of dir (as rsync does); `-`
        /// alone sends standard input as one stream.
        #[arg(required_unless_present_any = ["from_command", "shard"], value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Send the standard output of this command as one stream (run with sh -c; it
        /// must exit 0, or the transfer fails on both sides).
        #[arg(long, value_name = "COMMAND", conflicts_with = "paths")]
        from_command: Option<String>,
        /// The ticket printed by `haul recv`; `-` reads it from stdin. Any user can read
        /// a command line: prefer `--ticket-file` or HAUL_TICKET on shared hosts. Given
        /// several times: a chain fan-out (sent once, to the first, which passes it on).
        #[arg(
            long,
            value_name = "TICKET",
            env = "HAUL_TICKET",
            hide_env_values = true,
            required_unless_present = "ticket_file",
            conflicts_with = "ticket_file"
        )]
        to: Vec<String>,
        /// Read the ticket from this file (as written by `haul recv --ticket-file`);
        /// several: a chain fan-out, as with several --to.
        #[arg(long, value_name = "FILE")]
        ticket_file: Vec<PathBuf>,
        #[command(flatten)]
        transfer: TransferArgs,
        /// Send without TLS (connections are still authenticated and every block is
        /// still verified). Only on networks you trust.
        #[arg(long)]
        no_encrypt: bool,
    },
    /// Copy files and directories, on this host or between hosts: SRC and DST may be
    /// [user@]host:path (the far end is started over ssh; the data flows directly).
    #[command(override_usage = "haul copy [OPTIONS] SRC... DST")]
    Copy {
        /// Sources, then the destination (SRC... DST; s3://BUCKET/PREFIX too). `-` as the only SRC reads one
        /// stream from stdin; `-` as DST writes one stream to stdout.
        #[arg(required = true, num_args = 1.., value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// The stream is the standard output of this command, run where the source is
        /// (SRC is `host:` or left out for this host).
        #[arg(long, value_name = "COMMAND")]
        from_command: Option<String>,
        /// The stream goes into the standard input of this command, run where the
        /// destination is (DST is `host:`); its exit status is the transfer's.
        #[arg(long, visible_alias = "exec", value_name = "COMMAND")]
        to_command: Option<String>,
        /// DST `-` on a terminal: write the stream there anyway (refused otherwise, as
        /// zstd does; no -f, which is rsync's --filter).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        accept: AcceptArgs,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        object: object::ObjectArgs,
    },
    /// Measure in about 15 s, changing nothing, what would bound `haul copy SRC... DST`
    /// or `haul send PATH... --to TICKET` (source read, durable write at DST, each codec
    /// on a sample of the data, the network) and print the bottleneck, the settings to
    /// use and the predicted time.
    Probe {
        /// SRC... DST, as for copy (sources on this host; DST local or host:path); with
        /// --to or --ticket-file, every PATH is a source.
        #[arg(required = true, num_args = 1.., value_name = "SRC... DST")]
        paths: Vec<PathBuf>,
        /// Probe the copy to a waiting `haul recv` (its ticket; `-` reads it from
        /// stdin); the receiver keeps waiting for the sender afterwards.
        #[arg(long, value_name = "TICKET", conflicts_with = "ticket_file")]
        to: Option<String>,
        /// Read that ticket from this file (as written by `haul recv --ticket-file`).
        #[arg(long, value_name = "FILE")]
        ticket_file: Option<PathBuf>,
        /// Data streams the copy would use (default: twice the cores, 2 to 8).
        #[arg(long, value_name = "N")]
        streams: Option<usize>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Split sources into N byte-balanced shard files for a scheduler (`haul copy --shard
    /// FILE DST` moves one); `haul plan --check DIR DST` confirms they all arrived.
    Plan(PlanArgs),
    /// Change the bandwidth cap of a running `haul send` or `haul copy` of yours.
    Limit {
        /// Bytes per second (K, M, G: KiB, MiB, GiB), or `off`.
        #[arg(value_name = "RATE|off")]
        rate: String,
        /// The transfer's process id (needed when several run).
        #[arg(long, value_name = "PID")]
        pid: Option<u32>,
    },
    /// Print a completion script: `haul completions bash > /etc/bash_completion.d/haul`.
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page: `haul man > /usr/local/share/man/man1/haul.1`.
    Man,
    /// Galera's state transfer (`wsrep_sst_method=haul`), run by the `wsrep_sst_haul`
    /// script that `haul sst --install-script DIR` writes.
    Sst(SstArgs),
    /// The far end of a remote copy, started over ssh: reads its instructions on stdin.
    #[command(hide = true)]
    Serve {
        /// Print the versions this haul speaks and exit.
        #[arg(long)]
        probe: bool,
        /// This binary was just uploaded: include its own hash in the greeting.
        #[arg(long)]
        uploaded: bool,
    },
}

/// What the receiving side keeps of the sender's metadata (rsync's names). For a pull from
/// a host you do not fully trust.
#[derive(Debug, Args)]
pub struct AcceptArgs {
    /// Files belong to the receiving user, not the sender's owner; set-id bits are dropped.
    #[arg(long)]
    pub no_owner: bool,
    /// Files get the receiving user's group, not the sender's; set-gid bits are dropped.
    #[arg(long)]
    pub no_group: bool,
    /// Do not recreate character or block devices.
    #[arg(long)]
    pub no_devices: bool,
    /// Do not recreate FIFOs.
    #[arg(long)]
    pub no_specials: bool,
    /// A symlink to a directory at the destination stands for that directory (rsync's -K;
    /// only links that were there before the run and belong to you or root).
    #[arg(short = 'K', long)]
    pub keep_dirlinks: bool,
    /// Everything received gets this owner and group (rsync's; names are looked up on the
    /// receiving host; either part may be left out; set-id bits are dropped).
    #[arg(long, value_name = "USER:GROUP")]
    pub chown: Option<String>,
}

/// Options of `copy` between hosts.
#[derive(Debug, Args)]
pub struct RemoteArgs {
    /// Remote shell command used to start the far end (like rsync's -e).
    #[arg(
        short = 'e',
        long = "rsh",
        value_name = "COMMAND",
        env = "HAUL_RSH",
        hide_env_values = true
    )]
    pub rsh: Option<String>,
    /// The haul program on the far host (default: haul, found on its PATH; copied over
    /// for the transfer when missing or of another version).
    #[arg(long, value_name = "PATH")]
    pub remote_haul: Option<String>,
    /// Carry the data streams through the ssh connection instead of connecting directly.
    #[arg(long)]
    pub via_ssh: bool,
    /// Between hosts: no TLS on the data streams (still authenticated and verified).
    #[arg(long)]
    pub no_encrypt: bool,
    /// A far host without haul gets this one in a temporary directory, removed afterwards,
    /// instead of a copy kept in ~/.cache/haul there for the next run.
    #[arg(long)]
    pub no_cache: bool,
    /// Far ends advertise this address in their ticket instead of their own (NAT, tests).
    #[arg(long, value_name = "IP", hide = true)]
    pub remote_advertise: Option<std::net::IpAddr>,
    /// A further destination ([user@]host:path) of a copy, fed by the one before it (a
    /// chain fan-out: the sources are read and sent once; a stream's too: host:FILE, or
    /// host: with --to-command); repeatable.
    #[arg(long, value_name = "HOST:DST")]
    pub also: Vec<PathBuf>,
}

/// Options shared by `send` and `copy`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Streams: the expected size in bytes, for percent and ETA (like pv -s).
    #[arg(long, value_name = "BYTES")]
    pub size: Option<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Number of parallel data streams (default: twice the cores, 2 to 8; 8 for a copy of
    /// files on this host).
    #[arg(long, value_name = "N")]
    pub streams: Option<usize>,
    /// Compression per block: auto, none, lz4, zstd or zstd:LEVEL (default: auto between
    /// hosts, none on this host).
    #[arg(long, value_name = "CODEC")]
    pub compress: Option<String>,
    /// Block size, e.g. 4M (64K to 64M; default 4M).
    #[arg(long, value_name = "SIZE")]
    pub block_size: Option<String>,
    /// Streams: memory for blocks read but not yet written at the far end (default 64M,
    /// at most 256M); the receiver's own --buffer may lower it.
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Cap the bandwidth at RATE bytes per second on the wire, all streams together
    /// (K, M, G: KiB, MiB, GiB); change it while running with `haul limit`.
    #[arg(long, value_name = "RATE")]
    pub limit: Option<String>,
    /// TCP congestion control of the data connections, e.g. bbr or cubic (default: bbr
    /// where the kernel offers it, else the host's default).
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,
    /// rsync's spelling of --limit: a bare number is KiB per second.
    #[arg(long, value_name = "RATE", hide = true, conflicts_with = "limit")]
    pub bwlimit: Option<String>,
    /// Re-dial a dropped connection up to N times (at once, then after 0.25 s doubling to 4 s)
    /// before failing (default 5).
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,
    /// Files: end the run when nothing has moved for SECS, no data sent and no word from
    /// the receiver, which says it is there every second while busy (default 300; 0:
    /// never), as rsync's --timeout.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
}

/// `haul plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// SRC...: the sources, as `haul copy` takes them; with --check: DIR DST.
    #[arg(required = true, value_name = "SRC...|DIR DST")]
    pub paths: Vec<PathBuf>,
    /// How many shards to write (1 to 65536).
    #[arg(long, value_name = "N", required_unless_present = "check")]
    pub shards: Option<u32>,
    /// The directory to write shard-0 … shard-N-1 into (created if missing).
    #[arg(long, value_name = "DIR", required_unless_present = "check")]
    pub out: Option<PathBuf>,
    /// Confirm that every shard of the plan in DIR arrived in DST (the union is the
    /// plan, nothing twice, every entry there with its type and size).
    #[arg(long, conflicts_with_all = ["shards", "out"])]
    pub check: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// What to send of the sources (rsync's spellings and rules).
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Skip files matching PATTERN (rsync's rules: `/` anchors, trailing `/` = dirs only,
    /// `*`, `**`, `?`, `[...]`; the first matching --include/--exclude wins).
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<OsString>,
    /// Send files matching PATTERN even when a later --exclude matches them.
    #[arg(long, value_name = "PATTERN")]
    pub include: Vec<OsString>,
    /// Read exclude patterns from FILE, one a line (`-`: stdin; `#`, `;` comments).
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// Read include patterns from FILE, one a line.
    #[arg(long, value_name = "FILE")]
    pub include_from: Vec<PathBuf>,
    /// Send only the paths listed in FILE (relative to the one source directory; `a/./b`:
    /// `b` of `a`), with their parent directories (with -r: and all below a listed one).
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,
    /// --files-from and the -from files are separated by NUL, not newline.
    #[arg(short = '0', long)]
    pub from0: bool,
    /// Do not cross file system boundaries (mount points arrive empty).
    #[arg(short = 'x', long)]
    pub one_file_system: bool,
    /// Follow symlinks: send what they point to.
    #[arg(short = 'L', long)]
    pub copy_links: bool,
    /// Follow only symlinks that point outside the transfer (absolute, or above it).
    #[arg(long)]
    pub copy_unsafe_links: bool,
    /// Move exactly the entries of this shard file (written by `haul plan`), from the
    /// plan's sources (no SRC arguments).
    #[arg(long, value_name = "FILE")]
    pub shard: Option<PathBuf>,
    /// Send no extended attributes (ACLs, SELinux labels, capabilities, user.*); the
    /// destination's are left as they are.
    #[arg(long)]
    pub no_xattrs: bool,
    /// The include/exclude options in command-line order (filled by [`parse_from`]).
    #[arg(skip)]
    pub order: Vec<RuleArg>,
    /// `-r` given (filled by [`parse_from`]): --files-from recurses into listed directories.
    #[arg(skip)]
    pub recursive: bool,
}

/// One include/exclude option, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleArg {
    /// `--exclude PATTERN`.
    Exclude(OsString),
    /// `--include PATTERN`.
    Include(OsString),
    /// `--exclude-from FILE`.
    ExcludeFrom(PathBuf),
    /// `--include-from FILE`.
    IncludeFrom(PathBuf),
}

/// The help text of `-q` per command: what each one still prints.
const QUIET: [(&str, &str); 3] = [
    ("recv", "Print nothing but errors and the ticket"),
    ("send", "Print nothing but errors"),
    ("copy", "Print nothing but errors"),
];

/// The help headings, most used first within each command: an option's heading by its id
/// (recv's `--timeout` is about where the sender is). The order of the headings in
/// `--help` is that of their first option in the structs above.
fn heading(sub: &str, id: &str) -> Option<&'static str> {
    Some(match id {
        "timeout" if sub == "recv" => "Where",
        "from_command" | "to_command" | "force" | "checksum" | "delete" | "dry_run" | "inplace"
        | "delete_excluded" | "update" | "existing" | "ignore_existing" | "size_only" | "size"
        | "stream" | "shards" | "out" | "check" => "What",
        "to" | "ticket_file" | "listen" | "relay" => "Where",
        "exclude" | "include" | "exclude_from" | "include_from" | "files_from" | "from0"
        | "one_file_system" | "copy_links" | "copy_unsafe_links" | "shard" => "Filters",
        "no_xattrs" | "no_owner" | "no_group" | "no_devices" | "no_specials" | "keep_dirlinks"
        | "chown" => "Metadata",
        "streams" | "compress" | "block_size" | "buffer" | "limit" | "cc" | "keep_cache" => {
            "Performance"
        }
        "rsh" | "remote_haul" | "via_ssh" | "no_encrypt" | "no_cache" | "also" | "retries"
        | "timeout" => "Remote",
        "quiet" | "json" | "verbose" | "itemize_changes" | "stats" => "Output",
        _ => return None,
    })
}

/// Commands none of whose work the global options (-q, --json, -v, --stats…) change:
/// their `--help` leaves them out.
const NO_GLOBALS: [&str; 4] = ["limit", "completions", "man", "sst"];

/// The command-line definition, as `--help`, the completions and the man page show it.
pub fn command() -> clap::Command {
    let mut cmd =
        Cli::command()
            .max_term_width(100)
            .mut_args(|a| match heading("", a.get_id().as_str()) {
                // Rarely wanted: after each command's own performance options.
                Some(h) if a.get_id() == "keep_cache" => a.help_heading(h).display_order(900),
                Some(h) => a.help_heading(h),
                None => a,
            });
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().into()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(&name, |s| {
            s.mut_args(|a| match heading(&name, a.get_id().as_str()) {
                Some(h) => a.help_heading(h),
                None => a,
            })
        });
    }
    // A command that has its own `quiet` does not receive the global one; its value still
    // reaches `Cli::quiet`, and `haul -q copy` still works.
    for (sub, help) in QUIET {
        let q = cmd.get_arguments().find(|a| a.get_id() == "quiet");
        let q = q.map(|a| a.clone().help(help));
        if let Some(q) = q {
            cmd = cmd.mut_subcommand(sub, |s| s.arg(q));
        }
    }
    // The global options reach each command when the definition is built: hide them
    // then where they do not apply.
    cmd.build();
    for sub in NO_GLOBALS {
        cmd = cmd.mut_subcommand(sub, |s| {
            s.mut_args(|a| match a.is_global_set() && a.get_id() != "help" {
                true => a.hide(true),
                false => a,
            })
        });
    }
    cmd
}

/// Parses the command line; exits with clap's message and code on a syntax error, and
/// with 0 after `--help` or `--version` (also when stdout closed early: `| head -1`).
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|e| {
        if e.use_stderr() {
            // A bad command line of a `--json` run still ends with its one object.
            if std::env::args_os().any(|a| a == "--json") {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or("bad command line");
                let first = first.strip_prefix("error: ").unwrap_or(first);
                crate::stdio::println(&crate::progress::failure_json(first, e.exit_code()));
            }
            // clap's "error: " begins the message; every other haul message begins
            // "haul: error: ", and a script's grep for it should find this one too.
            let styled = e.render();
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let text = match colour {
                true => styled.ansi().to_string(),
                false => styled.to_string(),
            };
            let _ =
                std::io::Write::write_all(&mut std::io::stderr(), haul_prefixed(&text).as_bytes());
            std::process::exit(e.exit_code())
        }
        // Help and version go to stdout; a reader that stopped early is no error.
        let styled = e.render();
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let text = match colour {
            true => styled.ansi().to_string(),
            false => styled.to_string(),
        };
        crate::stdio::print(&text);
        std::process::exit(0)
    })
}

/// clap's rendered error `text` with its leading `error:` (bare or coloured) made
/// `haul: error:`, as every other message of haul begins.
fn haul_prefixed(text: &str) -> String {
    match text.find("error:") {
        Some(at) if !text[..at].contains('\n') => {
            format!("{}haul: {}", &text[..at], &text[at..])
        }
        _ => format!("haul: {text}"),
    }
}

/// Parses `args` (the program name first), keeping the order of the include/exclude
/// options, which clap keeps apart per option but rsync's first-match rule needs.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = habits::lone_h_is_help(args.into_iter().map(Into::into).collect());
    let cmd = command();
    let m = cmd.clone().try_get_matches_from(args).map_err(|e| {
        match unsupported::explain(&e, &cmd) {
            Some(m) => clap::Error::raw(clap::error::ErrorKind::UnknownArgument, format!("{m}\n")),
            None => e,
        }
    })?;
    let mut cli = Cli::from_arg_matches(&m)?;
    let recursive = cli.rsync.recursive > 0;
    let (sub, filter) = match &mut cli.command {
        CommandArgs::Send { transfer, .. } => ("send", &mut transfer.filter),
        CommandArgs::Copy { transfer, .. } => ("copy", &mut transfer.filter),
        CommandArgs::Plan(p) => ("plan", &mut p.filter),
        _ => return Ok(cli),
    };
    let Some(m) = m.subcommand_matches(sub) else {
        return Ok(cli);
    };
    let mut order: Vec<(usize, RuleArg)> = Vec::new();
    let mut take = |id: &str, make: &dyn Fn(OsString) -> RuleArg| {
        if let (Some(ix), Some(vals)) = (m.indices_of(id), m.get_many::<OsString>(id)) {
            order.extend(ix.zip(vals.map(|v| make(v.clone()))));
        }
    };
    take("exclude", &RuleArg::Exclude);
    take("include", &RuleArg::Include);
    let mut take_path = |id: &str, make: &dyn Fn(PathBuf) -> RuleArg| {
        if let (Some(ix), Some(vals)) = (m.indices_of(id), m.get_many::<PathBuf>(id)) {
            order.extend(ix.zip(vals.map(|v| make(v.clone()))));
        }
    };
    take_path("exclude_from", &RuleArg::ExcludeFrom);
    take_path("include_from", &RuleArg::IncludeFrom);
    order.sort_by_key(|(i, _)| *i);
    filter.order = order.into_iter().map(|(_, r)| r).collect();
    filter.recursive = recursive;
    Ok(cli)
}
