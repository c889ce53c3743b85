//! Hosts on one machine: network namespaces cabled to one switch (a bridge
//! in a namespace of its own), over which the tcp provider runs as between
//! machines. A cable can be cut while processes talk across it.
//! (`unshare`, which gives each host its name, is util-linux's, in every
//! Debian system.)
//!
//! Making namespaces takes root (`ip netns`, iproute2: `scripts/setup.sh`
//! installs it); [`Hosts::make`] gives `None` elsewhere, and the tests say
//! they were skipped.

use std::path::Path;
use std::process::Command;

use super::text;

/// `n` namespaces, host `i` at 10.N.0.(i+1)/24 on cable `i` to the switch;
/// every namespace (and so every cable) is deleted when dropped.
pub struct Hosts {
    names: Vec<String>,
    ips: Vec<String>,
    switch: String,
    /// The switch's end of each cable.
    ports: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2: scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        text(&out.stderr)
    );
}

impl Hosts {
    pub fn make(n: usize) -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let pid = std::process::id();
        // Distinct subnets per test process, inside the namespaces only.
        let net = 100 + pid % 150;
        let hosts = Hosts {
            names: (0..n).map(|i| format!("sat-h{i}-{pid}")).collect(),
            ips: (0..n).map(|i| format!("10.{net}.0.{}", i + 1)).collect(),
            switch: format!("sat-sw-{pid}"),
            ports: (0..n).map(|i| format!("s{pid}p{i}")).collect(),
        };
        let sw = hosts.switch.as_str();
        ip(&["netns", "add", sw]);
        ip(&["-n", sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", sw, "link", "set", "br0", "up"]);
        for i in 0..n {
            let (host, port) = (hosts.names[i].as_str(), hosts.ports[i].as_str());
            let nic = format!("s{pid}h{i}");
            ip(&["netns", "add", host]);
            ip(&["link", "add", &nic, "type", "veth", "peer", "name", port]);
            ip(&["link", "set", &nic, "netns", host]);
            ip(&["link", "set", port, "netns", sw]);
            ip(&["-n", sw, "link", "set", port, "master", "br0"]);
            ip(&["-n", sw, "link", "set", port, "up"]);
            let address = format!("{}/24", hosts.ips[i]);
            ip(&["-n", host, "addr", "add", &address, "dev", &nic]);
            ip(&["-n", host, "link", "set", &nic, "up"]);
            ip(&["-n", host, "link", "set", "lo", "up"]);
        }
        Some(hosts)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> &str {
        &self.ips[i]
    }

    /// `program` inside host `i`: its network namespace, and a hostname of
    /// its own (a UTS namespace), so that SAT sees another host, as between
    /// machines, and does not share memory across the cable.
    pub fn command(&self, i: usize, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.names[i]])
            .args(["unshare", "--uts", "sh", "-c"])
            .arg(r#"echo "$0" > /proc/sys/kernel/hostname && exec "$@""#)
            .arg(&self.names[i])
            .arg(program);
        cmd
    }

    /// Cuts host `i`'s cable at the switch: from now on nothing passes
    /// between it and the others, and no side is told (no reset, no
    /// error: packets vanish, as when a link fails between two switches).
    pub fn cut(&self, i: usize) {
        ip(&[
            "-n",
            &self.switch,
            "link",
            "set",
            &self.ports[i],
            "nomaster",
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in self.names.iter().chain([&self.switch]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
