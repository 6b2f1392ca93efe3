"""The network test bed: two namespaces joined by a veth link (shared/testbed/netlab).

`NetBed` drives the netlab script (up with an optional rate cap, down), runs commands on either
"host", reads the link's byte counters and measures its raw ceiling with iperf3. `Sshd` is a
throwaway OpenSSH server inside the destination namespace for scp, rsync and tar | ssh: its own
host key, client key and config in a temp dir, root login by key only, on a non-standard port.

Only the test bed's addresses (198.18.0.1, 198.18.0.2) and loopback are used. Not here: netem
delay or loss (not available on every kernel; netlab offers rate caps only).
"""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import procs

SRC_IP = "198.18.0.1"
DST_IP = "198.18.0.2"
SSH_PORT = 2202
IPERF_PORT = 5201


def rate_bits(link: str) -> int | None:
    """'1gbit' -> 1e9; 'unshaped' -> None. Raises ValueError on anything else."""
    if link == "unshaped":
        return None
    units = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
    for suffix, mult in units.items():
        if link.endswith(suffix) and link[: -len(suffix)].isdigit():
            return int(link[: -len(suffix)]) * mult
    raise ValueError(f"bad link {link!r}: use unshaped or a rate such as 100mbit, 1gbit, 10gbit")


class NetBed:
    """hsrc (198.18.0.1) <-> hdst (198.18.0.2); `down` ends everything still running in them.
    $NETLAB_A and $NETLAB_B name the namespaces instead (two runs side by side)."""

    def __init__(self, netlab: Path, src_ns: str | None = None, dst_ns: str | None = None):
        src_ns = src_ns or os.environ.get("NETLAB_A", "hsrc")
        dst_ns = dst_ns or os.environ.get("NETLAB_B", "hdst")
        self.netlab = netlab
        self.src_ns, self.dst_ns = src_ns, dst_ns
        self.src_dev = f"v-{src_ns}"
        self._env = dict(os.environ, NETLAB_A=src_ns, NETLAB_B=dst_ns,
                         NETLAB_IP_A=SRC_IP, NETLAB_IP_B=DST_IP)
        self._up = False

    def existing(self) -> list[str]:
        """Our namespace names that already exist (another run, or a stale one)."""
        out = procs.run(["ip", "netns", "list"]).stdout
        names = {line.split()[0] for line in out.splitlines() if line.strip()}
        return [ns for ns in (self.src_ns, self.dst_ns) if ns in names]

    def up(self, link: str):
        """Creates the bed if needed and sets the rate cap ('unshaped' = none)."""
        args = ["bash", str(self.netlab), "up"]
        if link != "unshaped":
            args += ["--rate", link]
        self._up = True
        procs.run(args, env=self._env)

    def down(self):
        """Deletes both namespaces (netlab kills what still runs in them). Idempotent."""
        if not self._up and not self.existing():
            return
        procs.run(["bash", str(self.netlab), "down"], env=self._env, check=False)
        self._up = False

    def on_src(self, argv: list) -> list:
        """argv run on the sending host."""
        return ["ip", "netns", "exec", self.src_ns, *map(str, argv)]

    def on_dst(self, argv: list) -> list:
        """argv run on the receiving host."""
        return ["ip", "netns", "exec", self.dst_ns, *map(str, argv)]

    def counters(self) -> tuple[int, int]:
        """(bytes sent src->dst, bytes sent dst->src) on the veth so far, link-layer bytes."""
        out = procs.run(["ip", "-n", self.src_ns, "-j", "-s", "link", "show", "dev",
                         self.src_dev]).stdout
        stats = json.loads(out)[0]["stats64"]
        return stats["tx"]["bytes"], stats["rx"]["bytes"]

    def wait_listening(self, port: int, timeout: float = 10.0, proc=None) -> bool:
        """True once something listens on DST_IP:port in the destination namespace."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = procs.run(self.on_dst(["ss", "-Hltn", f"sport = :{port}"]), check=False).stdout
            if out.strip():
                return True
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def iperf(self, seconds: float, streams: int) -> float | None:
        """The link's raw TCP goodput in bytes/s (iperf3, receiver side), or None on failure."""
        server = procs.spawn(self.on_dst(["iperf3", "-s", "-1", "-B", DST_IP, "-p", IPERF_PORT]))
        try:
            if not self.wait_listening(IPERF_PORT, proc=server):
                return None
            res = procs.run(self.on_src(["iperf3", "-c", DST_IP, "-p", IPERF_PORT, "-t", seconds,
                                         "-P", streams, "-J"]), check=False,
                            timeout=seconds + 30)
            if res.returncode != 0:
                return None
            end = json.loads(res.stdout)["end"]
            return end["sum_received"]["bits_per_second"] / 8
        except (subprocess.TimeoutExpired, KeyError, ValueError):
            return None
        finally:
            procs.stop(server)


class Sshd:
    """A throwaway sshd in the destination namespace, and the client options to reach it."""

    def __init__(self, bed: NetBed, workdir: Path, meter: procs.CpuMeter):
        self.bed, self.dir, self.meter = bed, workdir / "ssh", meter
        self.proc = None

    def start(self):
        """Makes keys and config, starts sshd and waits until it accepts a login."""
        d = self.dir
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in ("host_key", "client_key"):
            if not (d / name).exists():
                procs.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "haulbench",
                           "-f", d / name])
        shutil.copyfile(d / "client_key.pub", d / "authorized_keys")
        sftp = next((p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server")
                     if Path(p).exists()), "internal-sftp")
        (d / "sshd_config").write_text(
            f"ListenAddress {DST_IP}\nPort {SSH_PORT}\nHostKey {d / 'host_key'}\n"
            f"PidFile {d / 'sshd.pid'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
            f"Subsystem sftp {sftp}\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        self.proc = procs.spawn(self.bed.on_dst(["/usr/sbin/sshd", "-D", "-e", "-f",
                                                 d / "sshd_config"]),
                                self.meter, "dst", stderr=open(d / "sshd.log", "w"))
        if not self.bed.wait_listening(SSH_PORT, proc=self.proc):
            raise RuntimeError(f"sshd did not start: {(d / 'sshd.log').read_text()[-1000:]}")
        res = procs.run(self.bed.on_src(["ssh", *self.options(), f"root@{DST_IP}", "true"]),
                        check=False, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"ssh login to the test sshd failed: {res.stderr.strip()}")

    def options(self, port_flag: str = "-p") -> list[str]:
        """ssh client options (scp wants port_flag='-P')."""
        return ["-F", "/dev/null", "-i", str(self.dir / "client_key"), port_flag, str(SSH_PORT),
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]

    def stop(self):
        """Stops sshd (and any session it still serves)."""
        procs.stop(self.proc)
        self.proc = None
