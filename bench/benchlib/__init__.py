"""The haul benchmark harness: test bed, data sets, methods, measurement and report.

`bench/run.py` is the entry point; the modules here do the work:

- `procs`     child processes in their own process groups, CPU accounting per side (cgroups)
- `netbed`    the two-namespace test bed from shared/testbed/netlab, link counters, iperf3, sshd
- `datasets`  generating and caching the data sets, their content listings, warming the cache
- `dstfs`     where copies land: a fresh journaled ext4 (loop device) per timed run
- `methods`   the transfer methods (haul and the tools people use today) and one timed run
- `report`    the markdown tables

Standard library only (Python 3.11), so that it runs on a bare Debian with the apt packages
listed in bench/README.md.
"""
