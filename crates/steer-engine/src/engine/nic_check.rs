//! The start-time check of the NIC's setup against the engine's: every rx
//! queue that gets owned traffic has a socket, the RSS indirection table
//! spreads over the queues steer opened, and each opened queue's interrupt
//! may run on the CPU whose worker dispatches the queue. What it finds is a
//! list of one-line warnings, each saying what to set (`ethtool -L`,
//! `ethtool -X`, `/proc/irq/N/smp_affinity_list`); the engine logs them and
//! keeps them ([`Engine::start_warnings`](super::Engine::start_warnings)).
//! Nothing here refuses to start: a virtual device (veth) has no RSS table
//! or queue interrupts, and is told so.

use steer_core::cpu::CpuId;
use steer_xdp::nic::{self, Channels, QueueIrq};

/// What the kernel says about the device's setup.
#[derive(Debug, Clone)]
pub(super) struct NicFacts {
    pub(super) channels: Option<Channels>,
    /// The RSS indirection table; `Err` when it could not be read.
    pub(super) indirection: Result<Option<Vec<u32>>, String>,
    pub(super) irqs: Vec<QueueIrq>,
}

/// Reads `interface`'s setup (errors become "unknown").
pub(super) fn gather(interface: &str) -> NicFacts {
    NicFacts {
        channels: nic::channels(interface).ok().flatten(),
        indirection: nic::rss_indirection(interface).map_err(|e| e.to_string()),
        irqs: nic::queue_irqs(interface),
    }
}

/// The warnings for a device with `facts`, on which steer opened
/// `opened` (rx queue, CPU of the worker dispatching it).
pub(super) fn check(interface: &str, facts: &NicFacts, opened: &[(u32, CpuId)]) -> Vec<String> {
    let mut warnings = Vec::new();
    let is_open = |q: u32| opened.iter().any(|&(o, _)| o == q);
    let list = |qs: &[u32]| qs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if let Some(ch) = facts.channels {
        let closed: Vec<u32> = (0..ch.rx_queues()).filter(|&q| !is_open(q)).collect();
        if !closed.is_empty() {
            warnings.push(format!(
                "{interface}: rx queues {} have no steer socket: owned traffic arriving there \
                 goes to the kernel; open every queue, or give {interface} only the queues \
                 steer opens (ethtool -L {interface} combined {})",
                list(&closed),
                opened.len()
            ));
        }
    }
    match &facts.indirection {
        Ok(Some(table)) => {
            let mut elsewhere: Vec<u32> = table.iter().copied().filter(|&q| !is_open(q)).collect();
            elsewhere.sort_unstable();
            elsewhere.dedup();
            if !elsewhere.is_empty() {
                let n = table.iter().filter(|&&q| !is_open(q)).count();
                warnings.push(format!(
                    "{interface}: {n} of the {} RSS indirection entries send flows to queues \
                     {} that steer does not open: spread them over steer's queues \
                     (ethtool -X {interface} equal {} when it opens queues 0-{})",
                    table.len(),
                    list(&elsewhere),
                    opened.len(),
                    opened.len().saturating_sub(1)
                ));
            }
            let idle: Vec<u32> = opened
                .iter()
                .map(|&(q, _)| q)
                .filter(|q| !table.contains(q))
                .collect();
            if !idle.is_empty() {
                warnings.push(format!(
                    "{interface}: the RSS indirection table sends no flow to queues {}: their \
                     workers dispatch nothing (ethtool -X {interface} equal {})",
                    list(&idle),
                    opened.len()
                ));
            }
        }
        Ok(None) => warnings.push(format!(
            "{interface} has no RSS indirection table to check (a virtual device such as veth): \
             its driver picks each packet's rx queue; on a NIC, spread flows over steer's \
             queues with ethtool -X {interface} equal N"
        )),
        Err(e) => warnings.push(format!(
            "{interface}: cannot read the RSS indirection table ({e}); check it with \
             ethtool -x {interface}"
        )),
    }
    if facts.irqs.is_empty() {
        warnings.push(format!(
            "{interface}: no queue interrupt found in /proc/interrupts (a virtual device, or a \
             driver naming them otherwise): on a NIC, let each rx queue's interrupt run on the \
             CPU that dispatches the queue (/proc/irq/N/smp_affinity_list)"
        ));
    }
    for &(q, cpu) in opened {
        for irq in facts.irqs.iter().filter(|i| i.queue == q) {
            if !irq.cpus.contains(cpu) {
                warnings.push(format!(
                    "{interface}: interrupt {} ({}) of rx queue {q} runs on CPUs {}, but steer \
                     dispatches queue {q} on CPU {cpu}: echo {cpu} > \
                     /proc/irq/{}/smp_affinity_list (and keep irqbalance off it)",
                    irq.irq, irq.name, irq.cpus, irq.irq
                ));
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq(irq: u32, queue: u32, cpus: &str) -> QueueIrq {
        QueueIrq {
            irq,
            name: format!("eth1-TxRx-{queue}"),
            queue,
            cpus: cpus.parse().unwrap(),
        }
    }

    #[test]
    fn a_well_set_up_nic_gives_no_warning() {
        let facts = NicFacts {
            channels: Some(Channels {
                combined: 2,
                max_combined: 8,
                ..Channels::default()
            }),
            indirection: Ok(Some(vec![0, 1, 0, 1])),
            irqs: vec![irq(45, 0, "0"), irq(46, 1, "1")],
        };
        assert_eq!(
            check("eth1", &facts, &[(0, 0), (1, 1)]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_misconfiguration_is_one_line_that_says_what_to_set() {
        let facts = NicFacts {
            channels: Some(Channels {
                combined: 4,
                max_combined: 8,
                ..Channels::default()
            }),
            // Entries on queues 2 and 3 (not opened), none on queue 1.
            indirection: Ok(Some(vec![0, 2, 3, 0])),
            // Queue 1's interrupt on CPU 0, its dispatcher on CPU 1.
            irqs: vec![irq(45, 0, "0"), irq(46, 1, "0")],
        };
        let w = check("eth1", &facts, &[(0, 0), (1, 1)]);
        assert_eq!(w.len(), 4, "{w:#?}");
        assert!(w[0].contains("rx queues 2,3 have no steer socket") && w[0].contains("ethtool -L"));
        assert!(w[1].contains("2 of the 4 RSS") && w[1].contains("ethtool -X eth1 equal 2"));
        assert!(w[2].contains("no flow to queues 1"));
        assert!(w[3].contains("echo 1 > /proc/irq/46/smp_affinity_list"));
        assert!(w.iter().all(|l| !l.contains('\n')));
    }

    #[test]
    fn a_virtual_device_is_told_what_cannot_be_checked() {
        let facts = NicFacts {
            channels: Some(Channels {
                rx: 2,
                tx: 2,
                max_rx: 2,
                ..Channels::default()
            }),
            indirection: Ok(None),
            irqs: Vec::new(),
        };
        let w = check("veth0", &facts, &[(0, 0), (1, 1)]);
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(w[0].contains("no RSS indirection table") && w[0].contains("ethtool -X"));
        assert!(w[1].contains("smp_affinity_list"));
    }
}
