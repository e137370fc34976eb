//! Where the measuring thread runs: on one CPU of the NIC's NUMA node (as perftest binds
//! to the node by default), on one of `--cpus`, or where the scheduler puts it (`--no-pin`).
//!
//! Each side pins its measuring thread to ONE CPU, so that a ping-pong never migrates and the
//! TSC of one CPU times it. The client takes the first CPU of the chosen set and the server
//! the last, so that the two threads of `--loopback` (and a server and client started on one
//! machine) spin on different CPUs whenever the set has two. Rails of one process, and the
//! runs of a cluster sweep's round on one host, each take the set's next CPU
//! ([`choose_for_rail`], [`choose_for_slot`]). Only the measured loop is pinned: the control channel's
//! helper threads keep the process's whole CPU set.

use std::io;

use topo::Sysfs;

use crate::doctor::host::{allowed_cpus, format_cpulist, node_cpus};
use crate::plan::{PlanError, Role};

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PinChoice {
    /// One CPU of the NIC's NUMA node, or of the allowed CPUs where the node is unknown.
    #[default]
    Auto,
    /// One CPU of this list (`--cpus`).
    Cpus(Vec<u32>),
    /// No pinning (`--no-pin`).
    Off,
}

/// Where this side's measuring thread runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The NIC's NUMA node, `None` when sysfs does not know it (-1, or a virtual device).
    pub numa_node: Option<u32>,
    /// The CPU the measuring thread is pinned to; `None` with `--no-pin`.
    pub cpu: Option<u32>,
    /// Where the CPU came from, for the header.
    pub source: String,
}

/// The facts a placement is chosen from, injectable for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuFacts {
    /// The NIC's NUMA node.
    pub numa_node: Option<u32>,
    /// That node's CPUs, if the node and its CPU list are known.
    pub node_cpus: Option<Vec<u32>>,
    /// The CPUs this process may run on.
    pub allowed: Vec<u32>,
}

impl CpuFacts {
    /// The live facts for the RDMA device `device`.
    pub(crate) fn read(sysfs: &Sysfs, device: &str) -> io::Result<Self> {
        let numa_node = topo::RdmaDevice::read(sysfs, device)
            .ok()
            .and_then(|d| d.numa_node);
        Ok(CpuFacts {
            numa_node,
            node_cpus: numa_node.and_then(|n| node_cpus(sysfs, n)),
            allowed: allowed_cpus()?,
        })
    }
}

/// Chooses this side's CPU. `--cpus` naming a CPU the process may not use is a usage error
/// naming it and the allowed set.
pub(crate) fn choose(
    choice: &PinChoice,
    facts: &CpuFacts,
    role: Role,
) -> Result<Placement, PlanError> {
    choose_for_rail(choice, facts, role, 0)
}

/// [`choose`] for rail `rail` of a multi-rail run: the client's rail k takes the set's k-th
/// CPU from the front, the server's the k-th from the back (wrapping around a set smaller
/// than the rails), so that rails sharing a NUMA node spin on different CPUs where it can.
pub(crate) fn choose_for_rail(
    choice: &PinChoice,
    facts: &CpuFacts,
    role: Role,
    rail: usize,
) -> Result<Placement, PlanError> {
    let node = facts.numa_node;
    let (set, source) = match choice {
        PinChoice::Off => {
            return Ok(Placement {
                numa_node: node,
                cpu: None,
                source: "not pinned (--no-pin)".to_string(),
            })
        }
        PinChoice::Cpus(list) => (checked(list, &facts.allowed)?, "of --cpus".to_string()),
        PinChoice::Auto => auto_set(facts),
    };
    let nth = rail % set.len().max(1);
    let cpu = match role {
        Role::Client => set.get(nth),
        Role::Server => set.iter().rev().nth(nth),
    };
    let Some(&cpu) = cpu else {
        return Err(PlanError::Value(
            "this process may run on no CPU (sched_getaffinity returned none)".to_string(),
        ));
    };
    Ok(Placement {
        numa_node: node,
        cpu: Some(cpu),
        source: format!("{source} {}", format_cpulist(&set)),
    })
}

/// [`choose`] for a cluster sweep's run in CPU slot `slot` of its round on this host (rank 0
/// numbers them: clients first, then servers in reverse order): the chosen set's CPU at
/// that place, wrapping round a set smaller than the round's runs. The ranks of one host
/// share its CPUs unless the launcher bound each (torchrun and an oversubscribed `mpirun` do
/// not): all of them on the set's first CPU ran two clients of a round on one CPU (a
/// throttled link at a third of its rate), and unpinned, the scheduler put a ping-pong's two
/// sides on one (8 ms round trips instead of 60 us).
pub(crate) fn choose_for_slot(
    choice: &PinChoice,
    facts: &CpuFacts,
    slot: usize,
) -> Result<Placement, PlanError> {
    let (set, source) = match choice {
        PinChoice::Off => return choose(choice, facts, Role::Client),
        PinChoice::Cpus(list) => (checked(list, &facts.allowed)?, "of --cpus".to_string()),
        PinChoice::Auto => auto_set(facts),
    };
    let Some(&cpu) = set.get(slot % set.len().max(1)) else {
        return Err(PlanError::Value(
            "this process may run on no CPU (sched_getaffinity returned none)".to_string(),
        ));
    };
    Ok(Placement {
        numa_node: facts.numa_node,
        cpu: Some(cpu),
        source: format!(
            "{source} {}; slot {slot} of the sweep round's runs on this host",
            format_cpulist(&set)
        ),
    })
}

/// `--cpus`, every one of which the process must be allowed to run on.
fn checked(list: &[u32], allowed: &[u32]) -> Result<Vec<u32>, PlanError> {
    let bad: Vec<u32> = list
        .iter()
        .copied()
        .filter(|c| !allowed.contains(c))
        .collect();
    if bad.is_empty() {
        return Ok(list.to_vec());
    }
    Err(PlanError::Value(format!(
        "--cpus: CPU {} is not among the CPUs this process may run on ({})",
        format_cpulist(&bad),
        format_cpulist(allowed)
    )))
}

/// The NIC node's allowed CPUs; the allowed CPUs where the node or its CPUs are unknown or
/// none of them is allowed.
fn auto_set(facts: &CpuFacts) -> (Vec<u32>, String) {
    let allowed = || facts.allowed.clone();
    match (facts.numa_node, &facts.node_cpus) {
        (None, _) => (
            allowed(),
            "NIC's NUMA node unknown; one of the allowed CPUs".to_string(),
        ),
        (Some(n), None) => (
            allowed(),
            format!("node {n}'s CPU list unknown; one of the allowed CPUs"),
        ),
        (Some(n), Some(cpus)) => {
            let on: Vec<u32> = cpus
                .iter()
                .copied()
                .filter(|c| facts.allowed.contains(c))
                .collect();
            if on.is_empty() {
                (
                    allowed(),
                    format!("none of node {n}'s CPUs is allowed; one of the allowed CPUs"),
                )
            } else {
                (on, format!("of the NIC's node {n}"))
            }
        }
    }
}

impl Placement {
    /// "CPU 3 (of the NIC's node 0 0-15)", or "not pinned (--no-pin)".
    #[cfg(test)]
    pub(crate) fn describe(&self) -> String {
        let cpu = self.cpu.map(|c| c.to_string());
        describe(cpu.as_deref(), Some(&self.source))
    }

    /// Pins the calling thread to this placement's CPU until the guard drops (which puts
    /// back the CPUs it had); does nothing with `--no-pin`.
    pub(crate) fn pin(&self) -> io::Result<PinGuard> {
        let Some(cpu) = self.cpu else {
            return Ok(PinGuard { before: None });
        };
        let before = get_affinity()?;
        // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` was checked against the allowed set, which is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        set_affinity(&set)?;
        Ok(PinGuard {
            before: Some(before),
        })
    }
}

/// The header's text of a placement as the record holds it (`params.cpus`,
/// `params.placement`): "CPU 3 (of the NIC's node 0 0-15)", or "not pinned (--no-pin)".
pub(crate) fn describe(cpu: Option<&str>, source: Option<&str>) -> String {
    match (cpu, source) {
        (Some(cpu), Some(source)) => format!("CPU {cpu} ({source})"),
        (Some(cpu), None) => format!("CPU {cpu}"),
        (None, Some(source)) => source.to_string(),
        (None, None) => "not pinned".to_string(),
    }
}

/// Puts a pinned thread's CPUs back when dropped.
#[allow(missing_debug_implementations)] // cpu_set_t has no Debug
pub(crate) struct PinGuard {
    before: Option<libc::cpu_set_t>,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Some(set) = &self.before {
            // Nothing to do about a failure here: the thread stays pinned, which is harmless.
            let _ = set_affinity(set);
        }
    }
}

fn get_affinity() -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(set)
}

fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(node: Option<u32>, node_cpus: Option<Vec<u32>>, allowed: Vec<u32>) -> CpuFacts {
        CpuFacts {
            numa_node: node,
            node_cpus,
            allowed,
        }
    }

    #[test]
    fn the_nic_nodes_cpus_are_chosen_client_first_server_last() {
        let f = facts(Some(1), Some(vec![8, 9, 10, 11]), (0..16).collect());
        let c = choose(&PinChoice::Auto, &f, Role::Client).unwrap();
        let s = choose(&PinChoice::Auto, &f, Role::Server).unwrap();
        assert_eq!((c.cpu, s.cpu), (Some(8), Some(11)));
        assert_eq!(c.describe(), "CPU 8 (of the NIC's node 1 8-11)");
        assert_eq!(c.numa_node, Some(1));
    }

    #[test]
    fn each_rail_takes_another_cpu_of_the_node_where_it_can() {
        let f = facts(Some(1), Some(vec![8, 9, 10]), (0..16).collect());
        let cpu = |role, rail| {
            choose_for_rail(&PinChoice::Auto, &f, role, rail)
                .unwrap()
                .cpu
        };
        assert_eq!(
            [cpu(Role::Client, 0), cpu(Role::Client, 1)],
            [Some(8), Some(9)]
        );
        assert_eq!(
            [cpu(Role::Server, 0), cpu(Role::Server, 1)],
            [Some(10), Some(9)]
        );
        // More rails than CPUs: around again.
        assert_eq!(cpu(Role::Client, 3), Some(8));
    }

    #[test]
    fn each_run_of_a_sweep_round_takes_the_cpu_of_its_slot() {
        // A DGX's NIC node of 56 CPUs, eight runs of a round on it: each its own CPU.
        let f = facts(Some(0), Some((0..56).collect()), (0..112).collect());
        let cpus: Vec<_> = (0..8)
            .map(|slot| choose_for_slot(&PinChoice::Auto, &f, slot).unwrap().cpu)
            .collect();
        assert_eq!(cpus, (0..8).map(Some).collect::<Vec<_>>());
        // The guest: two pairs on two CPUs, slots 0-1 the clients, 2-3 the servers in
        // reverse pair order: the clients differ, and each pair's sides differ.
        let f = facts(None, None, vec![0, 1]);
        let cpu = |slot| choose_for_slot(&PinChoice::Auto, &f, slot).unwrap().cpu;
        let (client_a, client_b, server_b, server_a) = (cpu(0), cpu(1), cpu(2), cpu(3));
        assert_ne!(client_a, client_b);
        assert_ne!(client_a, server_a);
        assert_ne!(client_b, server_b);
        assert_eq!(
            choose_for_slot(&PinChoice::Auto, &f, 3).unwrap().describe(),
            "CPU 1 (NIC's NUMA node unknown; one of the allowed CPUs 0-1; slot 3 of the sweep \
             round's runs on this host)"
        );
        // --cpus: within the list; --no-pin stays off.
        let f = facts(None, None, (0..8).collect());
        let given = PinChoice::Cpus(vec![4, 5, 6]);
        assert_eq!(choose_for_slot(&given, &f, 4).unwrap().cpu, Some(5));
        assert_eq!(choose_for_slot(&PinChoice::Off, &f, 1).unwrap().cpu, None);
    }

    #[test]
    fn only_allowed_cpus_of_the_node_are_chosen() {
        let f = facts(Some(1), Some(vec![8, 9, 10, 11]), vec![0, 1, 9, 10]);
        let c = choose(&PinChoice::Auto, &f, Role::Client).unwrap();
        assert_eq!(c.cpu, Some(9));
        let f = facts(Some(1), Some(vec![8, 9]), vec![0, 1]);
        let c = choose(&PinChoice::Auto, &f, Role::Server).unwrap();
        assert_eq!(c.cpu, Some(1));
        assert!(c.describe().contains("none of node 1's CPUs is allowed"));
    }

    #[test]
    fn an_unknown_node_is_said_and_one_allowed_cpu_is_pinned() {
        let f = facts(None, None, vec![0, 1]);
        let c = choose(&PinChoice::Auto, &f, Role::Client).unwrap();
        let s = choose(&PinChoice::Auto, &f, Role::Server).unwrap();
        assert_eq!((c.cpu, s.cpu), (Some(0), Some(1)));
        assert!(
            c.describe().contains("NUMA node unknown"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn cpus_given_must_be_allowed() {
        let f = facts(None, None, vec![0, 1, 2, 3]);
        let c = choose(&PinChoice::Cpus(vec![2, 3]), &f, Role::Client).unwrap();
        assert_eq!(c.cpu, Some(2));
        let e = choose(&PinChoice::Cpus(vec![1, 7, 8]), &f, Role::Client).unwrap_err();
        assert!(
            e.message().contains("CPU 7-8 ") && e.message().contains("(0-3)"),
            "{e}"
        );
    }

    #[test]
    fn no_pin_pins_nothing() {
        let f = facts(Some(0), Some(vec![0]), vec![0]);
        let p = choose(&PinChoice::Off, &f, Role::Client).unwrap();
        assert_eq!(p.cpu, None);
        assert!(p.pin().is_ok());
    }

    #[test]
    fn pinning_holds_the_thread_on_its_cpu_and_the_guard_lets_go() {
        let allowed = allowed_cpus().unwrap();
        let before = allowed.clone();
        let f = facts(None, None, allowed);
        let p = choose(&PinChoice::Auto, &f, Role::Server).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let guard = p.pin().unwrap();
                assert_eq!(allowed_cpus().unwrap(), vec![p.cpu.unwrap()]);
                // SAFETY: sched_getcpu has no preconditions.
                assert_eq!(unsafe { libc::sched_getcpu() } as u32, p.cpu.unwrap());
                drop(guard);
                assert_eq!(allowed_cpus().unwrap(), before);
            });
        });
    }
}
