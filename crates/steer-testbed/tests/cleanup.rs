//! The test bed's promises, checked against the kernel: what it makes is
//! gone after drop, also after a panic, and parallel beds never share a
//! name. Needs root, as CI runs it.

use std::net::UdpSocket;

use steer_testbed::{cmd, Netns, Pair, TestNet};

fn netns_exists(name: &str) -> bool {
    cmd::ip(&["netns", "list"])
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

fn link_exists(dev: &str) -> bool {
    cmd::ip(&["link", "show", "dev", dev]).is_ok()
}

#[test]
fn a_test_net_is_removed_on_drop_and_carries_traffic_before() {
    let net = TestNet::new();
    let (ns, host) = (net.ns.clone(), net.host.clone());
    assert!(netns_exists(&ns) && link_exists(&host));
    assert!(net.link_show().contains(&host));
    let (host_mac, peer_mac) = net.macs();
    assert_ne!(host_mac, peer_mac);
    // A datagram from the peer reaches a socket on the host end.
    let sock = UdpSocket::bind((net.host_v4, 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    net.send_udp_v4(&[(b"hello", port)]);
    let mut buf = [0u8; 16];
    let (n, from) = sock.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from.ip()), (&b"hello"[..], net.peer_v4.into()));
    drop(net);
    assert!(!netns_exists(&ns), "{ns} left behind");
    assert!(!link_exists(&host), "{host} left behind");
}

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    let names = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let net = TestNet::new();
        let pair = Pair::new();
        *names.lock().unwrap() = Some((net.ns.clone(), net.host.clone(), pair.srv_ns.clone()));
        panic!("a failing assertion");
    });
    assert!(result.is_err());
    let (ns, host, srv) = names.into_inner().unwrap().unwrap();
    assert!(!netns_exists(&ns) && !netns_exists(&srv) && !link_exists(&host));
}

#[test]
fn parallel_beds_have_their_own_names() {
    let beds: Vec<(TestNet, Pair)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (TestNet::new(), Pair::new())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut names: Vec<&str> = beds
        .iter()
        .flat_map(|(n, p)| {
            [
                n.ns.as_str(),
                n.host.as_str(),
                p.srv_ns.as_str(),
                p.cli_ns.as_str(),
            ]
        })
        .collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all, "{names:?}");
    for (_, p) in &beds {
        assert!(p.srv_link().contains(&p.srv_dev));
        let udp = Pair::counters(&p.srv_ns, "snmp", "Udp:");
        assert!(udp.contains_key("InDatagrams"), "{udp:?}");
    }
}

#[test]
fn a_namespace_ends_its_processes_when_dropped() {
    let ns = Netns::new("sttb");
    let name = ns.name().to_owned();
    let child = Netns::command(&name, "sleep").arg("600").spawn().unwrap();
    let pid = child.id() as i32;
    // `ip netns exec` enters the namespace, then execs: until it has, the
    // process is not the namespace's to end.
    let entered = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let out = std::process::Command::new("ip")
            .args(["netns", "pids", &name])
            .output()
            .unwrap();
        let pids = String::from_utf8_lossy(&out.stdout).into_owned();
        if pids.split_whitespace().any(|p| p == pid.to_string()) {
            break;
        }
        assert!(
            std::time::Instant::now() < entered,
            "{pid} never entered {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(ns);
    // It ends (and is reaped here) within seconds, not after its 600.
    let mut child = child;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "{pid} still runs");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signal 0 only checks that the process exists.
    assert_ne!(unsafe { libc::kill(pid, 0) }, 0);
    assert!(!netns_exists(&name));
}
