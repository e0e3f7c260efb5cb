//! The topology shapes RFS must get right: the live machine (hwloc and sysfs
//! must agree), the seed's AMD machine, a 2-socket Intel-like machine with SMT,
//! an XML export, CPU hotplug, and bad input.

use std::fs;
use std::path::Path;

use steer_topology::{CpuSet, Error, Source, Topology};

fn list(set: &CpuSet) -> Vec<usize> {
    set.iter().collect()
}

#[test]
fn live_machine_hwloc_and_sysfs_agree_with_the_kernel() {
    let live = Topology::live().unwrap();
    assert_eq!(
        live.source(),
        &Source::Hwloc,
        "hwloc should work on this machine"
    );
    let sysfs = Topology::from_sysfs("/").unwrap();
    let online: CpuSet = fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(live.online_cpus(), online);
    assert_eq!(sysfs.online_cpus(), online);
    assert_eq!(live.llcs(), sysfs.llcs());
    for cpu in online.iter() {
        assert!(live.llc_of(cpu).is_some(), "online CPU {cpu} has no LLC");
        assert_eq!(live.numa_of(cpu), sysfs.numa_of(cpu));
    }
    // Every LLC's CPUs share with each other and with nobody else.
    for (a, b) in online
        .iter()
        .flat_map(|a| online.iter().map(move |b| (a, b)))
    {
        assert_eq!(live.shares_llc(a, b), live.llc_of(a) == live.llc_of(b));
    }
}

#[test]
fn seed_amd_machine_2_sockets_of_128_cores_8_per_l3() {
    let t = Topology::synthetic("pack:2 l3:16 core:8 pu:1").unwrap();
    assert_eq!(t.source().name(), "synthetic");
    assert_eq!(t.online_cpus(), CpuSet::first(256));
    assert_eq!(t.llcs().len(), 32);
    for (i, llc) in t.llcs().iter().enumerate() {
        assert_eq!(list(llc), (i * 8..i * 8 + 8).collect::<Vec<_>>());
    }
    assert!(t.shares_llc(0, 7));
    assert!(!t.shares_llc(7, 8));
    assert!(!t.shares_llc(127, 128), "different sockets");
    assert_eq!(t.llc_of(255), Some(31));
    assert_eq!(list(&t.cpus_of_llc(1)), (8..16).collect::<Vec<_>>());
}

#[test]
fn intel_like_two_sockets_with_smt() {
    let t = Topology::synthetic("pack:2 l3:1 core:28 pu:2").unwrap();
    assert_eq!(t.online_cpus().len(), 112);
    assert_eq!(t.llcs().len(), 2);
    assert_eq!(list(&t.llcs()[0]), (0..56).collect::<Vec<_>>());
    assert_eq!(list(&t.llcs()[1]), (56..112).collect::<Vec<_>>());
    // Logical order: the two hyperthreads of core 0 are CPUs 0 and 1.
    assert!(t.shares_llc(0, 1) && t.shares_llc(0, 55));
    assert!(!t.shares_llc(55, 56));
}

#[test]
fn numa_nodes_of_a_synthetic_model() {
    let t = Topology::synthetic("pack:2 [numa] l3:2 core:4 pu:2").unwrap();
    assert_eq!(t.numa_nodes().len(), 2);
    assert_eq!(t.numa_of(0), Some(0));
    assert_eq!(t.numa_of(31), Some(1));
    assert_eq!(list(&t.numa_nodes()[1]), (16..32).collect::<Vec<_>>());
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn xml_export_fixture_two_sockets_four_llcs() {
    // Exported with: lstopo --input "pack:2 [numa] l3:2 core:4 pu:2" --of xml
    let t = Topology::from_xml_file(fixture("two-socket-numa.xml")).unwrap();
    assert_eq!(t.source(), &Source::Xml(fixture("two-socket-numa.xml")));
    assert_eq!(t.online_cpus(), CpuSet::first(32));
    assert_eq!(t.llcs().len(), 4);
    assert_eq!(list(&t.llcs()[2]), (16..24).collect::<Vec<_>>());
    assert_eq!(t.numa_nodes().len(), 2);
    assert!(t.shares_llc(8, 15) && !t.shares_llc(15, 16));
}

#[test]
fn xml_export_of_this_vm_kind() {
    // Exported on a 2-vCPU machine of this project's kind: lstopo --of xml --no-io
    let t = Topology::from_xml_file(fixture("this-vm.xml")).unwrap();
    assert_eq!(list(&t.online_cpus()), vec![0, 1]);
    assert_eq!(t.llcs().len(), 1);
    assert!(t.shares_llc(0, 1));
}

#[test]
fn synthetic_cpu_offline_and_online_reach_the_shared_layout() {
    let t = Topology::synthetic("pack:1 l3:2 core:2 pu:1").unwrap();
    let layout = t.layout();
    t.set_online(2, false).unwrap();
    assert!(!t.is_online(2) && !layout.is_online(2));
    assert_eq!(list(&t.online_cpus()), vec![0, 1, 3]);
    // The LLC map does not change with hotplug.
    assert_eq!(t.llc_of(2), Some(1));
    t.set_online(2, true).unwrap();
    assert!(layout.is_online(2));
    assert!(matches!(
        t.set_online(4, false),
        Err(Error::UnknownCpu { cpu: 4, max: 3 })
    ));
    // A model has nothing to re-read.
    assert!(t.refresh_online().unwrap().is_empty());
}

/// Writes a fake sysfs tree: 4 CPUs, L3 {0,1} and {2,3}, per-CPU L2, two NUMA
/// nodes, with `online` as given.
fn fake_sysfs(root: &Path, online: &str) {
    let cpu = root.join("sys/devices/system/cpu");
    fs::create_dir_all(&cpu).unwrap();
    fs::write(cpu.join("possible"), "0-3\n").unwrap();
    fs::write(cpu.join("online"), format!("{online}\n")).unwrap();
    for c in 0..4 {
        for (idx, level, kind, shared) in [
            (0, 1, "Data", c.to_string()),
            (1, 1, "Instruction", c.to_string()),
            (2, 2, "Unified", c.to_string()),
            (
                3,
                3,
                "Unified",
                if c < 2 { "0-1".into() } else { "2-3".into() },
            ),
        ] {
            let dir = cpu.join(format!("cpu{c}/cache/index{idx}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("level"), format!("{level}\n")).unwrap();
            fs::write(dir.join("type"), format!("{kind}\n")).unwrap();
            fs::write(dir.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
        }
    }
    for (n, cpus) in [(0, "0-1"), (1, "2-3")] {
        let dir = root.join(format!("sys/devices/system/node/node{n}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cpulist"), cpus).unwrap();
    }
}

#[test]
fn sysfs_reader_finds_llcs_numa_and_follows_hotplug() {
    let dir = tempfile::tempdir().unwrap();
    fake_sysfs(dir.path(), "0-3");
    let t = Topology::from_sysfs(dir.path()).unwrap();
    assert_eq!(t.source().name(), "sysfs");
    assert_eq!(
        t.llcs().iter().map(list).collect::<Vec<_>>(),
        vec![vec![0, 1], vec![2, 3]]
    );
    assert_eq!(
        t.numa_nodes().iter().map(list).collect::<Vec<_>>(),
        vec![vec![0, 1], vec![2, 3]]
    );
    let layout = t.layout();

    // CPU 3 goes offline: a live topology re-reads rather than being told.
    fs::write(dir.path().join("sys/devices/system/cpu/online"), "0-2\n").unwrap();
    assert!(matches!(
        t.set_online(3, false),
        Err(Error::LiveOnlineState)
    ));
    assert_eq!(list(&t.refresh_online().unwrap()), vec![3]);
    assert!(!layout.is_online(3));
    assert_eq!(t.llc_of(3), Some(1));

    fs::write(dir.path().join("sys/devices/system/cpu/online"), "0-3\n").unwrap();
    assert_eq!(list(&t.refresh_online().unwrap()), vec![3]);
    assert!(layout.is_online(3));
    assert!(t.refresh_online().unwrap().is_empty());
}

#[test]
fn sysfs_reader_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = Topology::from_sysfs(dir.path()).unwrap_err().to_string();
    assert!(err.contains("sys/devices/system/cpu/online"), "{err}");
    fake_sysfs(dir.path(), "0-x");
    let err = Topology::from_sysfs(dir.path()).unwrap_err().to_string();
    assert!(err.contains("online") && err.contains("0-x"), "{err}");
}

#[test]
fn bad_synthetic_specs_are_errors_naming_the_spec() {
    for spec in [
        "",
        "   ",
        "bogus:3",
        "pack:2 l3:x",
        "pack:0 pu:1",
        "pu:2 core:2",
    ] {
        match Topology::synthetic(spec) {
            Err(e @ Error::BadSynthetic { .. }) => {
                assert!(e.to_string().contains(&format!("{spec:?}")), "{e}")
            }
            other => panic!("{spec:?} should be rejected, got {other:?}"),
        }
    }
}

#[test]
fn bad_xml_inputs_are_errors_naming_the_file() {
    let err = Topology::from_xml_file("/nonexistent/machine.xml").unwrap_err();
    assert!(matches!(err, Error::BadXml { .. }));
    assert!(err.to_string().contains("/nonexistent/machine.xml"));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.xml");
    fs::write(&junk, "<topology>not really</topology>").unwrap();
    let err = Topology::from_xml_file(&junk).unwrap_err();
    assert!(err.to_string().contains("junk.xml"), "{err}");
}

#[test]
fn pinning_through_a_model_binds_the_same_cpu_here() {
    // 256 CPUs in the model; threads still run on this machine: CPU 1 of
    // the model is CPU 1 here, CPU 200 is nowhere here (an error: the
    // thread stays where it was), 256 is not in the model.
    let t = Topology::synthetic("pack:2 l3:16 core:8 pu:1").unwrap();
    let here = Topology::live().unwrap().online_cpus();
    let last = here.iter().last().unwrap();
    std::thread::spawn(move || {
        t.pin_current_thread(last).unwrap();
        assert_eq!(
            steer_topology::thread::allowed_cpus().unwrap(),
            [last].into_iter().collect()
        );
        assert!(t.pin_current_thread(200).is_err());
        assert_eq!(
            steer_topology::thread::allowed_cpus().unwrap(),
            [last].into_iter().collect()
        );
        assert!(matches!(
            t.pin_current_thread(256),
            Err(Error::UnknownCpu { .. })
        ));
    })
    .join()
    .unwrap();
}

#[test]
fn pinning_through_the_live_machine_binds() {
    let t = Topology::live().unwrap();
    let last = t.online_cpus().iter().last().unwrap();
    std::thread::spawn(move || {
        t.pin_current_thread(last).unwrap();
        assert_eq!(steer_topology::thread::current_cpu().unwrap(), last);
    })
    .join()
    .unwrap();
}
