"""A cluster in a box: hosts as network namespaces on one bridge, with
links capped by tc, partitions, CPU limits and a real DNS server.

    with NetCluster(["dns", "client", "s0", "s1"], rate_mbit=200) as net:
        net.start_dns("client")                      # dnsmasq on host "dns"
        net.set_records("stoker.cluster.test", ["s0", "s1"])
        server = net.spawn("s0", [server_bin, "--port=50051", ...])
        net.partition("s1")                           # drops every packet
        ...

Every host is a namespace named stk<pid>-<host> (pid: the owner's), with
one veth link to a bridge in the namespace stk<pid>-sw and an address
10.213.0.<10 + i>/24; nothing is routed anywhere else, so the only
addresses a test can reach are the ones made here. Links are capped with a
tbf qdisc on both ends (the host's egress and the bridge port's, which is
the host's ingress); a partition replaces both with a FIFO of length 0,
which drops every packet (no RST, no ICMP: the peer only sees silence). A CPU limit puts a
host's processes in a cgroup (v1 cpu controller, or v2) with a CFS quota.

DNS: dnsmasq runs in a host of its own, answers for cluster.test from a
hosts file (one A record per host named, TTL 1 s, NXDOMAIN for a name with
none) and is told of changes with SIGHUP; the other hosts use it through
/etc/netns/<namespace>/resolv.conf, which `ip netns exec` mounts over
/etc/resolv.conf.

Clean-up: close() (also on leaving the `with`) kills every process in the
namespaces and deletes them, the resolv.conf folders and the cgroups. A
guard process started first does the same if the owner dies without
closing (SIGKILL, a Bazel timeout): it waits for its stdin to reach EOF.
Names carry the owner's pid, and the leftovers of owners no longer alive
are removed when a cluster starts.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SUBNET = "10.213.0"
_NAME = re.compile(r"^stk(\d+)-")
_CGROUP_V1 = "/sys/fs/cgroup/cpu"
_CGROUP_V2 = "/sys/fs/cgroup/unified"
_DNS_DOMAIN = "cluster.test"
# Bounds of the waits below (seconds).
_DNS_WAIT_S = 10
_KILL_WAIT_S = 10


def _sbin_path():
    path = os.environ.get("PATH", "/usr/bin:/bin")
    return path + ":/usr/sbin:/sbin"


# ip, tc and dnsmasq live in /usr/sbin, which a test's PATH may lack.
_ENV = dict(os.environ, PATH=_sbin_path())


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True,
                          text=True, env=_ENV).stdout


def unsupported():
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) for network namespaces"
    for tool in ("ip", "tc", "dnsmasq"):
        if shutil.which(tool, path=_sbin_path()) is None:
            return f"{tool} is missing (Debian: iproute2, dnsmasq-base)"
    probe = f"stk{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True,
                          text=True, env=_ENV)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True,
                   env=_ENV)
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_names():
    return [line.split()[0] for line in _ip("netns", "list",
                                             check=False).splitlines()
            if line.strip()]


def _cgroup_paths():
    return [os.path.join(root, d) for root in (_CGROUP_V1, _CGROUP_V2)
            if os.path.isdir(root) for d in os.listdir(root)]


def cleanup(tag):
    """Removes everything named for `tag` (stk<pid>): processes in its
    namespaces, the namespaces, resolv.conf folders and cgroups."""
    names = [n for n in _netns_names() if n.startswith(tag + "-")]
    for name in names:
        pids = _ip("netns", "pids", name, check=False).split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    deadline = time.monotonic() + _KILL_WAIT_S
    for name in names:
        while (_ip("netns", "pids", name, check=False).split()
               and time.monotonic() < deadline):
            time.sleep(0.02)
        _ip("netns", "del", name, check=False)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
    for cgroup in _cgroup_paths():
        if not os.path.basename(cgroup).startswith(tag + "-"):
            continue
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


def cleanup_stale():
    """Removes the leftovers of owners that are no longer alive."""
    tags = set()
    for name in _netns_names() + [os.path.basename(p)
                                  for p in _cgroup_paths()]:
        match = _NAME.match(name)
        if match:
            tags.add(int(match.group(1)))
    for pid in tags:
        if not _alive(pid):
            cleanup(f"stk{pid}")


class NetCluster:

    def __init__(self, hosts, rate_mbit=None):
        self.tag = f"stk{os.getpid()}"
        self.rate_mbit = rate_mbit
        self.hosts = {}          # name -> index
        self.processes = []
        self._dns = None
        cleanup_stale()
        # The guard: cleans up if this process dies without close().
        self._guard = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--guard", self.tag],
            stdin=subprocess.PIPE, start_new_session=True, env=_ENV)
        try:
            self._netns("sw")
            self._in("sw", "ip", "link", "add", "br0", "type", "bridge")
            self._in("sw", "ip", "link", "set", "br0", "up")
            for name in hosts:
                self.add_host(name)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- hosts and links -------------------------------------------------

    def ns(self, host):
        return f"{self.tag}-{host}"

    def _netns(self, host):
        _ip("netns", "add", self.ns(host))
        self._in(host, "ip", "link", "set", "lo", "up")

    def _in(self, host, *args):
        return subprocess.run(["ip", "netns", "exec", self.ns(host), *args],
                              check=True, capture_output=True, text=True,
                              env=_ENV).stdout

    def address(self, host):
        return f"{SUBNET}.{10 + self.hosts[host]}"

    def _links(self, host):
        """(host side, bridge side) interface names."""
        i = self.hosts[host]
        return f"{self.tag}h{i}", f"{self.tag}s{i}"

    def add_host(self, name):
        if name in self.hosts or not re.fullmatch(r"[a-z0-9]{1,12}", name):
            raise ValueError(f"bad or repeated host name {name!r}")
        if len(self.hosts) >= 200:
            raise ValueError("at most 200 hosts")
        self.hosts[name] = len(self.hosts)
        self._netns(name)
        inner, port = self._links(name)
        _ip("link", "add", inner, "netns", self.ns(name), "type", "veth",
            "peer", "name", port, "netns", self.ns("sw"))
        self._in("sw", "ip", "link", "set", port, "master", "br0")
        self._in("sw", "ip", "link", "set", port, "up")
        self._in(name, "ip", "addr", "add", f"{self.address(name)}/24",
                 "dev", inner)
        self._in(name, "ip", "link", "set", inner, "up")
        self.set_rate(name, self.rate_mbit)

    def _qdisc(self, host, *spec):
        inner, port = self._links(host)
        for where, dev in ((host, inner), ("sw", port)):
            subprocess.run(["ip", "netns", "exec", self.ns(where), "tc",
                            "qdisc", "del", "dev", dev, "root"],
                           capture_output=True, env=_ENV)
            if spec:
                self._in(where, "tc", "qdisc", "add", "dev", dev, "root",
                         *spec)

    def set_rate(self, host, rate_mbit):
        """Caps the host's link both ways (None: uncapped)."""
        if rate_mbit is None:
            self._qdisc(host)
            return
        # A burst of 10 ms at the rate (at least 64 KiB) and a queue of
        # 50 ms, as a switch port's buffer.
        burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 * 0.010))
        self._qdisc(host, "tbf", "rate", f"{rate_mbit}mbit", "burst",
                    str(burst), "latency", "50ms")

    def partition(self, host):
        """Drops every packet to and from the host, silently."""
        # A FIFO of no packets: tc drops each one as it is queued (netem is
        # not in every kernel; this is).
        self._qdisc(host, "pfifo", "limit", "0")

    def heal(self, host):
        self.set_rate(host, self.rate_mbit)

    # --- processes -------------------------------------------------------

    def spawn(self, host, args, cpu_share=None, **popen):
        """Starts `args` in the host's namespace (in a cgroup with
        `cpu_share` CPUs when given); the cluster kills it on close()."""
        command = ["ip", "netns", "exec", self.ns(host)]
        if cpu_share is not None:
            # Joins the cgroup before `ip netns exec`, which remounts /sys
            # for the namespace (no cgroup folders there).
            procs = self._cgroup(host, cpu_share)
            command = ["sh", "-c", f'echo $$ > {procs} && exec "$@"',
                       "sh"] + command
        popen["env"] = dict(popen.get("env") or os.environ,
                            PATH=_ENV["PATH"])
        process = subprocess.Popen(command + list(args), **popen)
        self.processes.append(process)
        return process

    def _cgroup(self, host, cpu_share):
        """A cgroup limiting its processes to `cpu_share` CPUs; returns its
        cgroup.procs file."""
        name = f"{self.tag}-{host}"
        period = 100000
        if os.path.isdir(_CGROUP_V1):
            path = os.path.join(_CGROUP_V1, name)
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                f.write(str(period))
            with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(period * cpu_share)))
        else:
            path = os.path.join(_CGROUP_V2, name)
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "cpu.max"), "w") as f:
                f.write(f"{int(period * cpu_share)} {period}")
        return os.path.join(path, "cgroup.procs")

    # --- DNS -------------------------------------------------------------

    def start_dns(self, *clients, host="dns"):
        """dnsmasq on `host`, the resolver of the `clients` hosts."""
        if self._dns is not None:
            raise RuntimeError("DNS already started")
        self._records_dir = tempfile.mkdtemp(prefix=f"{self.tag}-dns-")
        self._hosts_file = os.path.join(self._records_dir, "records")
        # dns.cluster.test names the server itself: once a client resolves
        # it, dnsmasq is up (and takes SIGHUP instead of dying of it).
        self._records = {"dns." + _DNS_DOMAIN: [self.address(host)]}
        self._write_records()
        self._dns = self.spawn(host, [
            "dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
            "--no-poll", f"--listen-address={self.address(host)}",
            "--bind-interfaces", "--port=53", f"--local=/{_DNS_DOMAIN}/",
            f"--addn-hosts={self._hosts_file}", "--local-ttl=1",
            "--cache-size=0", "--user=root", "--pid-file=",
            "--log-facility=-"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        for client in clients:
            folder = f"/etc/netns/{self.ns(client)}"
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "resolv.conf"), "w") as f:
                f.write(f"nameserver {self.address(host)}\n"
                        "options timeout:1 attempts:2\n")
        self._dns_client = clients[0] if clients else None
        if self._dns_client is not None:
            self._wait_for_records("dns." + _DNS_DOMAIN)

    def _write_records(self):
        with open(self._hosts_file + ".tmp", "w") as f:
            for name, addresses in sorted(self._records.items()):
                for address in addresses:
                    f.write(f"{address} {name}\n")
        os.replace(self._hosts_file + ".tmp", self._hosts_file)

    def _wait_for_records(self, name):
        want = self._records[name]
        deadline = time.monotonic() + _DNS_WAIT_S
        while time.monotonic() < deadline:
            if self.resolve(self._dns_client, name) == want:
                return
            if self._dns.poll() is not None:
                raise AssertionError(f"dnsmasq exited ({self._dns.returncode})")
            time.sleep(0.05)
        raise AssertionError(f"DNS did not answer {want} for {name}")

    def set_records(self, name, hosts):
        """Makes `name` (under cluster.test) resolve to the hosts'
        addresses (none: NXDOMAIN), and waits until the first client host
        sees exactly that."""
        if not name.endswith("." + _DNS_DOMAIN):
            raise ValueError(f"{name} is not under {_DNS_DOMAIN}")
        self._records[name] = sorted(self.address(h) for h in hosts)
        self._write_records()
        self._dns.send_signal(signal.SIGHUP)
        if self._dns_client is not None:
            self._wait_for_records(name)

    def resolve(self, host, name):
        """The IPv4 addresses `name` has from `host` (getaddrinfo)."""
        result = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), "getent", "ahostsv4",
             name], capture_output=True, text=True, env=_ENV)
        return sorted({line.split()[0] for line in result.stdout.splitlines()})

    # --- the end ---------------------------------------------------------

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            try:
                process.wait(timeout=_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        cleanup(self.tag)
        if self._dns is not None:
            shutil.rmtree(self._records_dir, ignore_errors=True)
        if self._guard is not None:
            self._guard.stdin.close()
            self._guard.wait(timeout=_KILL_WAIT_S + 5)
            self._guard = None


def _guard(tag):
    """Waits for the owner to close stdin (or die), then cleans up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.stdin.buffer.read()
    cleanup(tag)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--guard":
        _guard(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "--cleanup-stale":
        cleanup_stale()
    else:
        sys.exit("usage: netcluster.py --guard TAG | --cleanup-stale")
