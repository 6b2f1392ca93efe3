//! Unit tests of the configuration (kept apart so mod.rs stays short).

use super::*;

fn cfg(args: &[&str]) -> Result<Config> {
    use clap::Parser;
    let mut all = vec!["haul"];
    all.extend_from_slice(args);
    Config::from_cli(Cli::try_parse_from(all).unwrap())
}

#[test]
fn copy_picks_local_push_pull_or_between() {
    let c = cfg(&["copy", "/a", "/b"]).unwrap();
    assert!(matches!(c.command, Command::Copy { .. }));
    let c = cfg(&["copy", "/a", "./x:y"]).unwrap();
    assert!(matches!(c.command, Command::Copy { .. }));
    let c = cfg(&["copy", "-e", "ssh -p 2222", "/a", "u@db2:/d", "--no-owner"]).unwrap();
    let Command::Remote {
        plan,
        ssh,
        transfer,
        accept,
    } = c.command
    else {
        panic!()
    };
    assert!(matches!(plan, RemoteCopy::Push { .. }));
    assert!(!accept.owner && accept.group && accept.devices);
    assert_eq!(ssh.rsh, ["ssh", "-p", "2222"]);
    assert_eq!(ssh.remote_haul, "haul");
    assert!(transfer.encrypt);
    let c = cfg(&["copy", "db1:/a", "db1:/b", "/d", "--no-encrypt"]).unwrap();
    let Command::Remote { plan, transfer, .. } = c.command else {
        panic!()
    };
    assert!(matches!(plan, RemoteCopy::Pull { .. }));
    assert!(!transfer.encrypt);
    let c = cfg(&["copy", "db1:/a", "[::1]:/b"]).unwrap();
    assert!(matches!(
        c.command,
        Command::Remote {
            plan: RemoteCopy::Between { .. },
            ..
        }
    ));
}

#[test]
fn copy_refuses_mixed_or_bad_remote_forms() {
    for args in [
        &["copy", "/a", "db1:/b", "/d"][..],
        &["copy", "db1:/a", "db2:/b", "/d"],
        &["copy", "/a", "h::mod"],
        &["copy", "/a", "/b", "--via-ssh"],
        &["copy", "-e", "ssh 'x", "/a", "h:/b"],
    ] {
        let e = cfg(args).unwrap_err();
        assert_eq!(e.exit_code(), crate::error::exit::USAGE, "{args:?}: {e}");
    }
}

#[test]
fn a_stream_fans_out_to_several_tickets_or_far_ends_of_one_kind() {
    let c = cfg(&["send", "-", "--ticket-file", "a", "--ticket-file", "b"]).unwrap();
    assert!(matches!(c.command, Command::SendPipe { ref chain, .. } if chain.len() == 1));
    // Standard input carries the stream, so no ticket may come from it.
    let t = crate::transport::Ticket {
        addrs: vec!["127.0.0.1:1".parse().unwrap()],
        fingerprint: [0; 32],
        secret: crate::transport::Secret::from_bytes([1; 32]),
    }
    .encode();
    assert!(cfg(&["send", "-", "--to", &t, "--to", &t]).is_ok());
    let e = cfg(&["send", "-", "--to", &t, "--to", "-"]).unwrap_err();
    assert!(
        e.to_string().contains("standard input carries the stream"),
        "{e}"
    );
    let c = cfg(&[
        "copy", "-", "db1:/x", "--also", "db2:/y", "--also", "db3:/z",
    ])
    .unwrap();
    let Command::CopyPipe {
        plan: PipeCopy::Push { also, .. },
        ..
    } = c.command
    else {
        panic!()
    };
    assert_eq!(also.len(), 2);
    let c = [
        "copy",
        "-",
        "db1:",
        "--to-command",
        "tar x",
        "--also",
        "db2:",
    ];
    assert!(cfg(&c).is_ok());
    assert!(cfg(&["copy", "-", "db1:/x", "--also", "db2:"]).is_err());
    assert!(cfg(&["copy", "db1:/x", "-", "--also", "db2:/y"]).is_err());
}

#[test]
fn a_capped_copy_on_this_host_moves_units_of_a_quarter_second_at_the_cap() {
    let block = |args: &[&str]| match cfg(args).unwrap().command {
        Command::Copy { transfer, .. } | Command::Remote { transfer, .. } => transfer.block_size,
        _ => panic!("{args:?}"),
    };
    assert_eq!(block(&["copy", "/a", "/b"]), 4 << 20);
    assert_eq!(block(&["copy", "--limit", "1M", "/a", "/b"]), 256 << 10);
    assert_eq!(block(&["copy", "--limit", "3M", "/a", "/b"]), 512 << 10);
    assert_eq!(block(&["copy", "--limit", "10K", "/a", "/b"]), 64 << 10);
    assert_eq!(block(&["copy", "--limit", "1G", "/a", "/b"]), 4 << 20);
    assert_eq!(block(&["copy", "--bwlimit", "1024", "/a", "/b"]), 256 << 10);
    // Given by hand, or across a network (paced in pieces there): as asked.
    assert_eq!(
        block(&["copy", "--limit", "1M", "--block-size", "8M", "/a", "/b"]),
        8 << 20
    );
    assert_eq!(block(&["copy", "--limit", "1M", "/a", "db2:/b"]), 4 << 20);
}

#[test]
fn a_copy_on_this_host_runs_more_streams_than_one_between_hosts() {
    let streams = |args: &[&str]| match cfg(args).unwrap().command {
        Command::Copy { transfer, .. } | Command::Remote { transfer, .. } => transfer.streams,
        _ => panic!("{args:?}"),
    };
    assert_eq!(streams(&["copy", "/a", "/b"]), LOCAL_STREAMS);
    assert_eq!(streams(&["copy", "/a", "db2:/b"]), default_streams());
    assert_eq!(streams(&["copy", "--streams", "3", "/a", "/b"]), 3);
}
